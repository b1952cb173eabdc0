"""Hidden-state draft heads: one config reader (``config``), one load path and registry (``loader``), one
chain (``chain``), and one module per family (``eagle3``, ``mtp_deepseek``, ``dflash``, ...), each built
on its family's transformers layer classes (``family``). Imports torch and transformers."""
