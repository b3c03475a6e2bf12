"""The error type for bad user input (files, keys, names): entry points print it as one line."""


class InputError(ValueError):
    """Input that cannot be used as given; the message names the file, key or line."""
