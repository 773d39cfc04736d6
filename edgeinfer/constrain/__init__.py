"""Constrained decoding: the next token is drawn only from those a grammar allows.

llguidance does the grammar work (JSON Schema and Lark, a token mask per step). The modules here
adapt it to edgeinfer, one concern each:

    tokenizer.py  the model's GGUF vocabulary -> llguidance's tokenizer (built once per model)
    grammar.py    what the caller asks for (a JSON schema, "any JSON object", a Lark grammar)
                  -> an llguidance grammar, with the bounds that let a small model finish
    matcher.py    one generation's grammar state, and the sampler wrapper that enforces it
    unique.py     uniqueItems, which no grammar can express, kept by following the JSON as it grows
"""
from edgeinfer.constrain.grammar import ANY_JSON_OBJECT, Grammar, make_grammar
from edgeinfer.constrain.matcher import GrammarMatcher
from edgeinfer.constrain.tokenizer import make_lltokenizer

__all__ = ["ANY_JSON_OBJECT", "Grammar", "GrammarMatcher", "make_grammar", "make_lltokenizer"]
