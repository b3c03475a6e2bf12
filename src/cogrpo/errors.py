"""The library's error types, for bad user input (files, keys, names) and an unusable reward server: entry points
print them as one line."""


class InputError(ValueError):
    """Input that cannot be used as given; the message names the file, key or line."""


class RewardServerError(InputError):
    """The reward server is unreachable, timed out, or failed a batch: one line saying which, and why (an
    InputError, so that every entry point stops with that line rather than a traceback; an optional reward term
    scores 0 instead: cogrpo.rewards.combine)."""
