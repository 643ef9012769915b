"""benchmarks/coding_round.py: the phase clock of one coding round."""

from __future__ import annotations

import importlib


def test_the_phase_clock_charges_the_innermost_phase_and_evaluation_keeps_its_sampling(bench):
    import torch

    coding_round = importlib.import_module("coding_round")
    ticks = iter(range(0, 1000))
    clock = coding_round.PhaseClock(timer=lambda: float(next(ticks)))
    clock.enter("collection")  # 0
    clock.enter("sampling")  # 1: collection 1
    output = torch.zeros(4, 7, dtype=torch.long)  # 2 prompts x 2 samples, 3 prompt columns + 4 new tokens
    inputs = torch.tensor([[0, 5, 6], [0, 5, 6], [7, 8, 9], [7, 8, 9]])
    mask = torch.tensor([[0, 1, 1], [0, 1, 1], [1, 1, 1], [1, 1, 1]])
    clock.count_generate((None,), {"input_ids": inputs, "attention_mask": mask}, output)
    clock.exit()  # 2: sampling 1
    clock.enter("scoring")  # 3: collection 2
    clock.count_scored((None, ["```aux```", " ", ""], ["```main```", "", "\n"]), {}, [0.5, 1.0, 0.0])
    clock.exit()  # 4: scoring 1
    clock.exit()  # 5: collection 3
    clock.enter("evaluation")  # 6
    clock.enter("sampling")  # 7: evaluation 1
    clock.count_generate((None, inputs[:1]), {}, output[:1])
    clock.exit()  # 8: evaluation/sampling 1
    clock.exit()  # 9: evaluation 2
    assert clock.charged == {"collection": 3, "sampling": 1, "scoring": 1, "evaluation": 2, "evaluation/sampling": 1}
    assert clock.tokens == {"collection": 16, "evaluation": 4} and clock.scored == {"collection": 3}
    assert clock.prompts["collection"] == {(5, 6), (7, 8, 9)}  # padding left out: the prompts as sent
    report = clock.report(total=12.0)
    assert report["phases"] == {
        "sampling": 1,
        "scoring": 1,
        "pairs": 3,
        "training": 0,
        "evaluation": 3,
        "load": 0,
        "other": 4,
    }
    assert report["scored"] == {"collection": 3, "evaluation": 0} and report["prompts"] == {
        "collection": 2,
        "evaluation": 1,
    }
    assert len(report["prompt_digest"]["collection"]) == 16
    assert report["empty"] == {"collection": 2, "evaluation": 0}  # both agents' answers blank
    clock.enter("sampling")  # vLLM's engine: each row's samples are lists of ids, prompts as sent
    clock.count_engine((None, [[5, 6], [3]]), {}, [[[1, 2, 3], [4]], [[5, 6]]])
    clock.count_engine((None, [[0]]), {}, [[[7]]])  # a new engine's one-token check: not the round's work
    clock.exit()
    assert clock.tokens["collection"] == 16 + 6 and clock.prompts["collection"] == {(5, 6), (7, 8, 9), (3,)}
