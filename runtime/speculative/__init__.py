"""Speculative decoding without a draft model: drafts from the request's own text (n-gram lookup) and
from the radix tree's cached continuations, verified by the target model in one extend pass."""
