"""The one error every grammar module raises, kept apart so that the backend, the compile pool and its
worker can all import it without importing each other."""


class GrammarError(ValueError):
    """A grammar the backend refused; str() is a message for the client (HTTP 400)."""


class GrammarTimeout(GrammarError):
    """A compile that ran past --grammar-timeout (under `auto`, llguidance is asked instead)."""
