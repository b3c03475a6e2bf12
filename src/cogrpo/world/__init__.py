"""The embedded world: names, scenes and renderer, GenEval-style specs and their exact checker, prompts, tokenizer."""
