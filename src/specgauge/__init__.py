"""specgauge: does speculative decoding pay off on your own LLM workload?"""

__version__ = "0.1.0"
