"""Option errors in two lines: the message first, "did you mean" for a misspelt option, where options are listed."""

from __future__ import annotations

import pytest

from comlrl_lightning.runtime.parse_errors import (
    Problem,
    closest_option,
    explain,
    problem_lines,
    report_tree,
)

UNKNOWN_IN_A_PART = """Parser key "model":
  Does not validate against any of the Union subtypes
  Subtypes: [<class 'lightning.pytorch.core.module.LightningModule'>, <class 'NoneType'>]
  Errors:
    - Problem with given class_path 'comlrl_lightning.MADPOModule':
        Option 'dpo_betta' is not accepted
    - Expected a <class 'NoneType'>
  Given value type: <class 'jsonargparse._util.NestedArg'>
  Given value: NestedArg(key='dpo_betta', val='0.2')"""

BAD_NESTED_VALUE = """Parser key "model":
  Does not validate against any of the Union subtypes
  Subtypes: [<class 'lightning.pytorch.core.module.LightningModule'>, <class 'NoneType'>]
  Errors:
    - Expected a <class 'NoneType'>
    - Problem with given class_path 'comlrl_lightning.MADPOModule':
        Parser key "sampling.top_k":
          Does not validate against any of the Union subtypes
          Subtypes: [<class 'jsonargparse.typing.PositiveInt'>, <class 'NoneType'>]
          Errors:
            - Not of type PositiveInt: does not conform to restriction v>0
            - Expected a <class 'NoneType'>
          Given value type: <class 'str'>
          Given value: -1
  Given value type: <class 'jsonargparse._util.NestedArg'>
  Given value: NestedArg(key='sampling.top_k', val='-1')"""

UNKNOWN_CLASS = """Parser key "model":

  - Expected a path but comlrl_lightning.MADPOModul either not accessible or invalid
  - Does not validate against any of the Union subtypes
  Subtypes: [<class 'lightning.pytorch.core.module.LightningModule'>, <class 'NoneType'>]
  Errors:
    - Problem with given class_path 'comlrl_lightning.MADPOModul':
        module 'comlrl_lightning' has no attribute 'MADPOModul'
    - Expected a <class 'NoneType'>
  Given value type: <class 'str'>
  Given value: comlrl_lightning.MADPOModul"""

MADPO = ("comlrl_lightning.MADPOModule", "model.init_args")


def test_the_report_tree_follows_indentation():
    tree = report_tree(UNKNOWN_IN_A_PART)
    assert [node.text for node in tree] == ['Parser key "model":']
    errors = tree[0].children[2]
    assert errors.text == "Errors:" and [child.text[:12] for child in errors.children] == [
        "- Problem wi",
        "- Expected a",
    ]
    assert errors.children[0].children[0].text == "Option 'dpo_betta' is not accepted"


@pytest.mark.parametrize(
    "report, problem",
    [
        (UNKNOWN_IN_A_PART, Problem("model.init_args.dpo_betta", "", True, MADPO)),
        (
            BAD_NESTED_VALUE,  # the None alternative listed first is passed over
            Problem(
                "model.init_args.sampling.top_k",
                "Not of type PositiveInt: does not conform to restriction v>0",
                False,
                MADPO,
            ),
        ),
        (
            UNKNOWN_CLASS,
            Problem(
                "model.init_args",
                "module 'comlrl_lightning' has no attribute 'MADPOModul'",
                False,
                ("comlrl_lightning.MADPOModul", "model.init_args"),
            ),
        ),
        ("unrecognized arguments: --trainer.max_stepz 3", Problem("trainer.max_stepz", "", True)),
        ("Parser key \"config\": File does not exist: '/x.yaml'", Problem("config", "File does not exist: '/x.yaml'")),
        (
            "argument data_total_epochs(data.init_args) --> trainer.max_epochs: invalid Optional value: '3'",
            Problem("trainer.max_epochs", "computed from data.init_args (by data_total_epochs): set that instead"),
        ),
        (
            "Parser key \"model\":\n  Problem with given class_path 'a.B':\n    Parser key \"x\":\n      Expected a <class 'float'>. Got value: abc",
            Problem("model.init_args.x", "Expected a float. Got value: abc", False, ("a.B", "model.init_args")),
        ),
        (  # a user rarely means null: the other alternative is reported
            "Parser key \"seed\":\n  Errors:\n    - Expected a <class 'NoneType'>\n    - Expected a <class 'int'>. Got value: x",
            Problem("seed", "Expected a int. Got value: x"),
        ),
    ],
    ids=[
        "unknown-option",
        "bad-value",
        "unknown-class",
        "unrecognized",
        "config-file",
        "linked",
        "class-repr",
        "not-none",
    ],
)
def test_explain_finds_the_innermost_message_and_the_full_option(report, problem):
    assert explain(report_tree(report)) == problem


def test_a_misspelt_option_gets_the_closest_one_in_its_group_and_a_long_shared_prefix_alone_suggests_nothing():
    known = [
        "model.init_args.dpo_beta",
        "model.init_args.seed",
        "model.init_args.team",
        "model.init_args.sampling.top_k",
    ]
    assert closest_option("model.init_args.dpo_betta", known) == "model.init_args.dpo_beta"
    assert closest_option("model.init_args.samplng.top_k", known) == "model.init_args.sampling.top_k"
    assert closest_option("model.init_args.zzz", known) is None
    assert closest_option("model.init_args.sampling.top_kk", known) == "model.init_args.sampling.top_k"


def test_the_lines_name_the_option_as_the_user_wrote_it():
    problem = Problem("model.init_args.dpo_betta", "", True, MADPO)
    known = ["model.init_args.dpo_beta"]
    assert problem_lines(problem, known, ["fit", "--model.init_args.dpo_betta", "0.2"], "comlrl-lightning fit") == [
        "error: --model.init_args.dpo_betta: no such option; did you mean --model.init_args.dpo_beta?",
        "comlrl-lightning fit --model.help comlrl_lightning.MADPOModule lists MADPOModule's options, "
        "comlrl-lightning fit --help the others",
    ]
    short = problem_lines(problem, known, ["fit", "--model.dpo_betta=0.2"], "p")
    assert short[0] == "error: --model.dpo_betta: no such option; did you mean --model.dpo_beta?"
    from_a_file = problem_lines(problem, known, ["fit", "--config", "c.yaml"], "p")
    assert from_a_file[0] == "error: model.init_args.dpo_betta: no such option; did you mean model.init_args.dpo_beta?"
    value = problem_lines(Problem("trainer.max_steps", "Expected an int"), [], ["--trainer.max_steps=x"], "p")
    assert value == ["error: --trainer.max_steps: Expected an int", "p --help lists the options"]


def _cli_error(capsys, *words):
    from comlrl_lightning.cli import run_cli

    with pytest.raises(SystemExit) as exit_info:
        run_cli(["fit", "--config", "configs/madpo.yaml", *words])
    assert exit_info.value.code == 2
    return capsys.readouterr().err.strip().splitlines()


@pytest.mark.slow  # builds the command's parser (about 2 s)
def test_the_command_line_reports_a_typo_in_two_lines(capsys, monkeypatch):
    monkeypatch.chdir(__file__.rsplit("/tests/", 1)[0])
    lines = _cli_error(capsys, "--model.init_args.dpo_betta", "0.2")
    assert lines[0] == "error: --model.init_args.dpo_betta: no such option; did you mean --model.init_args.dpo_beta?"
    assert len(lines) == 2 and "--model.help comlrl_lightning.MADPOModule" in lines[1]
    lines = _cli_error(capsys, "--trainer.max_stepz", "3")
    assert lines[0] == "error: --trainer.max_stepz: no such option; did you mean --trainer.max_steps?"
    lines = _cli_error(capsys, "--model.init_args.sampling.top_k", "-1")
    assert lines == [
        "error: --model.init_args.sampling.top_k: Not of type PositiveInt: does not conform to restriction v>0",
        lines[1],
    ]
    assert len(lines) == 2


@pytest.mark.slow  # builds the command's parser
def test_a_misspelt_subcommand_is_one_line_with_a_suggestion_and_help_still_prints_the_usage(capsys):
    from comlrl_lightning.cli import run_cli

    with pytest.raises(SystemExit) as exit_info:
        run_cli(["fitt"])
    assert exit_info.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[0].startswith("error: 'fitt' is not one of fit, ") and lines[0].endswith("; did you mean 'fit'?")
    assert len(lines) == 2
    with pytest.raises(SystemExit) as exit_info:
        run_cli(["fit", "--help"])
    assert exit_info.value.code == 0
    assert "--trainer.max_steps" in capsys.readouterr().out  # the full usage, only here
