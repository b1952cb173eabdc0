"""Test doubles and harnesses that ship with specgauge (the tests, the benchmarks and a user's own
checks use them; the product never imports them — ``tests/unit/test_layers.py`` holds that):

- ``fakeserver``: an OpenAI-compatible server with scripted faults and vLLM-shaped chunks;
- ``scripted_server``: a server whose step cost follows a known law and whose drafts are the real
  drafters' replay (the deterministic ground truth for the prediction machinery); ``scripted_drafts``:
  what it answers and drafts (the logged outputs, the replayed traces per run, synthetic acceptance draws);
- ``server_process``: scripted servers in processes of their own;
- ``gpu_check``: calibrate, sweep and predict a GPU-shaped scripted server;
- ``engine``: tiny random-weight models for the engine's unit tests.
"""
