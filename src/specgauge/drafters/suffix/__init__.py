"""``suffix`` drafter: vLLM v0.32.0's suffix decoding (``vllm/v1/spec_decode/suffix_decoding.py``), which
calls ArcticInference 0.3.0's ``SuffixDecodingCache``; both mirrored here in pure Python.

What vLLM + ArcticInference do (and this package does):

* Per request, a *local* trie over prompt + output so far (one sequence); one *global* trie over the
  outputs of requests, each its own sequence. A request's output enters the global trie token by
  token while it runs (``add_active_response``), not only when it ends, so running requests and the
  request itself are visible to every request. Suffixes are cut at ``max_tree_depth`` tokens.
* ``max_cached_requests``: each started request takes a global slot; when more than that many are
  cached the oldest-started one (FIFO) is removed from the global trie. 0 disables the global trie.
* Each step: the context is the last ``max_tree_depth`` tokens of the history. For every match length
  m = 1, 2, ... < len(context) whose last-m-token context occurs in a trie, a draft is grown greedily
  down the highest-count child, at most ``min(k, int(max_spec_factor * m + 1e-6))`` tokens, stopping
  when the path probability (product of count ratios) drops below ``min_token_prob``; its score is
  the sum of those probabilities. The highest score wins (ties: the longer match), and the local
  trie's draft wins ties with the global trie's. So the draft length varies per step, 0..k.
* vLLM caps k at ``max_model_len - L - 1`` and skips requests with ``L >= max_model_len``.

One module a concern, each importing only those listed before it:

* ``trie``: the trie, a twin of ArcticInference's C++ ``SuffixTree``, and its draft search;
* ``unknown``: which drafts a replay can vouch for when the cache lacks tokens a server learned;
* ``positions``: the draft at every output position, and the paths a server could take through them;
* ``cache``: the cache protocol and the pure-Python cache, with the fast replay as its methods;
* ``native``: ArcticInference's own cache behind the same protocol (optional extra ``specgauge[suffix]``);
* ``tail``: what a server learned past a logged output's end, as a value;
* ``trace``: ``SuffixTrace``, a replay's steps and tail;
* ``bounds``: a request's bounds and the one owner of the low / high replay pair;
* ``drafter``: ``SuffixDrafter`` itself: begin / propose / end / replay.

The engine's own call order, for a replay of its cache from bench records, is offline's
(``specgauge.offline.schedule``): it serves any stateful drafter.
"""

from specgauge.drafters.suffix.drafter import SuffixDrafter
from specgauge.drafters.suffix.trace import SuffixTrace
from specgauge.drafters.suffix.trie import Draft, SuffixTree, best_draft, f32, spec_limits

__all__ = ["Draft", "SuffixDrafter", "SuffixTrace", "SuffixTree", "best_draft", "f32", "spec_limits"]
