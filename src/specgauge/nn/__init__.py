"""The transformer the embedded engine serves and the draft model / EAGLE-3 / MTP heads run on.

Below both ``drafters`` and ``engine`` (ARCHITECTURE.md's one-way rule): ``transformer`` is the model
and its KV cache, ``weights`` loads a Hugging Face checkpoint into it. Importing this package costs
nothing; torch loads with its modules.
"""
