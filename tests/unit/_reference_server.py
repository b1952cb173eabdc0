"""A reference server for replay tests: it steps a drafter as vLLM's proposers step it, over a target that
is a fixed continuation per prompt (greedy: it emits that continuation whatever was drafted), cut at
``max_tokens``. Like vLLM (and the embedded engine) it counts a step's accepted draft tokens before it
cuts the output, and like vLLM's suffix proposer it learns the whole final step, also past the cut."""

from __future__ import annotations

import random
from dataclasses import dataclass

from specgauge.drafters.base import accepted_prefix, make_drafter

Request = tuple[list[int], list[int], int]  #: (prompt, the target's continuation, max_tokens)


@dataclass
class Served:
    output: list[int]  #: what the log holds: the continuation cut at max_tokens
    counts: tuple[int, int, int]  #: (drafts, draft tokens, accepted tokens), as the server counts them
    steps: list[tuple[int, int]]  #: (drafted, accepted) per drafting step (vLLM's per_step_* lists)
    final: int | None  #: the final step's accepted count (None: the final step drafted nothing)


def workload(seed: int, n: int, cut: bool) -> list[Request]:
    """Prompts that carry a motif, continuations of 40 that repeat it with noise; ``cut``: each at a random
    ``max_tokens`` of 4..24, else at the continuation's end."""
    rng = random.Random(seed)
    motifs = [[rng.randrange(12) for _ in range(rng.randint(3, 7))] for _ in range(4)]
    reqs = []
    for _ in range(n):
        m = rng.choice(motifs)
        prompt = [rng.randrange(12) for _ in range(5)] + m
        cont = (m * 12)[:40]
        cont = [t if rng.random() > 0.15 else rng.randrange(12) for t in cont]
        reqs.append((prompt, cont, rng.randint(4, 24) if cut else len(cont)))
    return reqs


def serve(requests: list[Request], k: int, kind: str = "suffix", **options: object) -> list[Served]:
    """Every request, in order, through one drafter of ``kind`` at ``k``."""
    d = make_drafter(kind, num_speculative_tokens=k, **options)
    out = []
    for i, (prompt, cont, max_tokens) in enumerate(requests):
        rid = f"s{i}"
        d.begin(rid, prompt)
        emitted = cont[:1]  # the prefill's token
        steps: list[tuple[int, int]] = []
        final = None
        while len(emitted) < max_tokens:
            draft = d.propose(rid, prompt + emitted, k)
            pos = len(emitted)
            a = accepted_prefix(draft, cont, pos)  # counted before the cut
            final = a if draft else None
            if draft:
                steps.append((len(draft), a))
            emitted = cont[: pos + a + 1]  # accepted drafts + the bonus / correction, past the cut too
        d.end(rid, emitted)  # vLLM learns the whole final step
        counts = (len(steps), sum(n for n, _ in steps), sum(a for _, a in steps))
        out.append(Served(emitted[:max_tokens], counts, steps, final))
    return out
