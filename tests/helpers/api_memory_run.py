"""One tiny iterative run against an API comparator at URL, reporting the process's peak memory.

``python -m tests.helpers.api_memory_run URL ROOT``: two rounds with the OpenAI-format comparator at
URL (its defaults: 8 requests in flight, ``max_response_bytes`` 4 MiB); prints one JSON line with
``peak_mb`` (VmHWM, the resident-set high-water mark) and ``error`` (the run's error, if any). The
server runs in the test's process, so this process's peak is the client's alone.
"""

from __future__ import annotations

import json
import sys


def peak_mb() -> float:
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith("VmHWM:"))
    return int(line.split()[1]) / 1024


def main(url: str, root: str) -> None:
    import torch

    from comlrl_lightning.comparators import ApiComparator
    from comlrl_lightning.errors import ComlrlError
    from tests.helpers.iterative_run import make_run

    torch.set_num_threads(1)
    comparator = ApiComparator(url=url, format="openai", model="m", key_env="COMLRL_TEST_API_KEY", num_candidates=4)
    comparator.backoff_base = 0.01
    module, datamodule, trainer = make_run(root, data=dict(comparator=comparator, num_iterations=2), max_epochs=4)
    error = None
    try:
        trainer.fit(module, datamodule)
    except ComlrlError as failure:
        error = str(failure)
    print(json.dumps({"peak_mb": peak_mb(), "error": error}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
