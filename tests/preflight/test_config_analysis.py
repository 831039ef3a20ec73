"""analyse(): missed overrides and never-read keys from real tracked loads; key lines per format."""

from __future__ import annotations

import json
import pickle

import pytest
from config_kit import load, write

from trainmedic.errors import PreflightError
from trainmedic.preflight.config_analysis import analyse
from trainmedic.preflight.config_lines import key_lines


def read_all(node) -> None:
    json.dumps(node)  # reads every key


def brief(findings) -> list[tuple[str, str, int | None]]:
    return [(f.kind, f.key, f.line) for f in findings]


# -- missed_override --------------------------------------------------------------------------

THREE_COPIES = {
    ".yaml": "a:\n  steps: 100\nb:\n  steps: 100\nc:\n  steps: 100\n",
    ".toml": "[a]\nsteps = 100\n\n[b]\nsteps = 100\n\n[c]\nsteps = 100\n",
    ".json": '{\n  "a": {"steps": 100},\n  "b": {"steps": 100},\n  "c": {\n    "steps": 100\n  }\n}\n',
}
LINE_OF_C_STEPS = {".yaml": 6, ".toml": 8, ".json": 5}


@pytest.mark.parametrize("suffix", sorted(THREE_COPIES))
def test_a_copy_the_override_missed_is_named_at_its_line_in_every_format(tracker, tmp_path, suffix):
    cfg = load(write(tmp_path / f"config{suffix}", THREE_COPIES[suffix]))
    cfg["a"]["steps"] = 3
    cfg["b"]["steps"] = 3
    read_all(cfg)
    [finding] = analyse(tracker.snapshot(), ["run.py", "--seed", "3", "--max-steps=3"])
    assert (finding.kind, finding.file, finding.key, finding.line) == (
        "missed_override",
        f"config{suffix}",
        "c.steps",
        LINE_OF_C_STEPS[suffix],
    )
    assert finding.related == ("a.steps", "b.steps")
    assert finding.message.startswith(
        "c.steps = 100 was not changed, but a.steps and b.steps were set to 3 (by an override?): "
        "a run with --max-steps 3 still does 100 here"
    )


def test_without_a_matching_flag_the_message_says_what_the_run_still_uses(tracker, tmp_path):
    cfg = load(write(tmp_path / "config.yaml", THREE_COPIES[".yaml"]))
    cfg["a"]["steps"] = 3
    cfg["b"]["steps"] = 4
    read_all(cfg)
    [finding] = analyse(tracker.snapshot(), ["run.py", "--steps", "7", "--fast"])
    assert finding.message.startswith(
        "c.steps = 100 was not changed, but a.steps was set to 3 and b.steps to 4 (by an override?): "
        "the run still uses 100 here"
    )


def test_consistent_copies_defaults_deletions_and_replaced_sections_are_no_missed_override(tracker, tmp_path):
    text = (
        "a: {steps: 100, name: x}\nb: {steps: 3, name: y}\nc: {steps: 100, name: z}\n"
        "d: {steps: 100}\ne: {lr: 1}\nlayers: [{steps: 1}]\n"
    )
    cfg = load(write(tmp_path / "config.yaml", text))
    cfg["a"]["steps"] = 3  # b already says 3: consistent
    cfg["c"]["steps"] = cfg["c"]["steps"]
    cfg["d"] = {"steps": 3}  # the whole section replaced
    cfg["layers"][0]["steps"] = 3
    cfg["a"].pop("name")  # popping a key is not an override of the other names
    cfg["e"].setdefault("steps", 5)  # nor is filling in a default
    read_all(cfg)
    assert [f for f in analyse(tracker.snapshot()) if f.kind == "missed_override"] == []


def test_an_override_with_the_same_value_still_counts_and_shows_old_equal_new(tracker, tmp_path):
    cfg = load(write(tmp_path / "config.yaml", "a: {steps: 100}\nb: {steps: 7}\n"))
    cfg["a"]["steps"] = 100
    read_all(cfg)
    [finding] = analyse(tracker.snapshot())
    assert (finding.key, finding.line) == ("b.steps", 2)
    assert "a.steps was set to 100" in finding.message
    [entry] = tracker.snapshot()["files"][0]["set"]
    assert (entry["old"], entry["new"]) == ("100", "100")


def test_list_positions_are_not_names_and_files_are_separate(tracker, tmp_path):
    first = load(write(tmp_path / "one.yaml", "xs: [[1, 2], [3, 4]]\nsteps: 1\n"))
    second = load(write(tmp_path / "two.yaml", "steps: 1\n"))
    first["xs"][0] = [9]
    second["steps"] = 2
    read_all(first)
    read_all(second)
    assert analyse(tracker.snapshot()) == []


# -- never_read -------------------------------------------------------------------------------

NEVER_READ = """\
lr: 0.1
learning_rate: 0.01
model:
  width: 64
  dropuot: 0.1
unused:
  a: 1
  b: [1, 2]
mixed: [1, {k: 2}]
"""


def test_keys_never_read_are_named_with_their_value_and_whole_unread_sections_once(tracker, tmp_path):
    cfg = load(write(tmp_path / "config.yaml", NEVER_READ))
    assert cfg.get("lr") == 0.1 and cfg["model"]["width"] == 64 and cfg["mixed"][1]["k"] == 2
    findings = analyse(tracker.snapshot())
    assert brief(findings) == [
        ("never_read", "learning_rate", 2),
        ("never_read", "model.dropuot", 5),
        ("never_read", "unused", 6),
    ]
    assert findings[0].message.startswith("learning_rate = 0.01 is never read: a typo of a key the code")
    assert findings[2].related == ("unused.a", "unused.b")
    assert findings[2].message.startswith("unused is never read (2 keys, e.g. unused.a = 1)")


def test_never_read_is_not_reported_for_a_copied_file_or_an_unfinished_run(tracker, tmp_path):
    cfg = load(write(tmp_path / "config.yaml", NEVER_READ))
    assert cfg["lr"] == 0.1
    assert [f.key for f in analyse(tracker.snapshot(), complete=False)] == []
    pickle.dumps(cfg)  # e.g. torch.save(cfg) or a spawn worker: reads we cannot see
    assert analyse(tracker.snapshot()) == []


def test_a_file_loaded_and_never_used_is_one_finding(tracker, tmp_path):
    load(write(tmp_path / "config.json", '{"a": 1, "b": {"c": 2}}'))
    [finding] = analyse(tracker.snapshot())
    assert (finding.kind, finding.key, finding.line) == ("never_read", "", None)
    assert finding.message.startswith("config.json was loaded but none of its 2 keys was read")


def test_an_override_applied_after_the_value_was_read_is_reported_as_too_late(tracker, tmp_path):
    cfg = load(write(tmp_path / "config.toml", "[train]\nepochs = 10\nbatch = 32\n"))
    epochs = cfg["train"]["epochs"]
    cfg["train"]["batch"]
    cfg["train"]["epochs"] = 1  # too late: `epochs` was already taken
    cfg["train"]["epoch"] = 1  # a typo: nothing reads it
    assert epochs == 10
    assert [(f.key, f.line, f.message.split(":")[0]) for f in analyse(tracker.snapshot())] == [
        (
            "train.epochs",
            2,
            "train.epochs was set to 1 after the program had read it (as 10) and was never read again",
        ),
        ("train.epoch", None, "train.epoch was set to 1 but nothing reads it"),
    ]


def test_findings_are_sorted_by_file_line_and_key(tracker, tmp_path):
    for name in ("b.yaml", "a.yaml"):
        cfg = load(write(tmp_path / name, "z: 1\ny: 2\nx: {steps: 1}\nw: {steps: 1}\n"))
        cfg["x"]["steps"] = 2
        cfg["z"], cfg["x"]["steps"], cfg["w"]["steps"]
    findings = analyse(tracker.snapshot())
    assert [(f.file, f.line, f.kind) for f in findings] == [
        ("a.yaml", 2, "never_read"),
        ("a.yaml", 4, "missed_override"),
        ("b.yaml", 2, "never_read"),
        ("b.yaml", 4, "missed_override"),
    ]


def test_a_snapshot_of_another_format_is_refused_with_the_expected_one():
    with pytest.raises(PreflightError, match="format 'other/1', expected 'trainmedic.configs/1'"):
        analyse({"format": "other/1", "files": []})


# -- key lines --------------------------------------------------------------------------------


def test_yaml_key_lines_follow_nesting_sequences_flow_style_and_block_scalars():
    text = """\
%YAML 1.2
---
# comment: not a key
top:
  nested: 1   # trailing: comment
  "quoted key": 2
  'single': 3
notes: |
  fake: key inside a block scalar
  more: text
layers:
- width: 3
  act: relu
- width: 4
  sub:
    - deep: 1
flow: {a: 1, b: {c: 2}, d: [x, {e: 3}]}
multi: {
  f: 1,
  g: 2 }
long: a plain scalar
  continued: here
dup: 1
dup: 2
base: &b
  k: 1
alias: *b
---
second: doc
"""
    lines = key_lines(text, "config.yaml")
    assert {
        k: lines.get(k)
        for k in (
            "top",
            "top.nested",
            "top.quoted key",
            "top.single",
            "notes",
            "layers",
            "layers.0.width",
            "layers.0.act",
            "layers.1.width",
            "layers.1.sub.0.deep",
            "flow.a",
            "flow.b.c",
            "flow.d.1.e",
            "multi.f",
            "multi.g",
            "long",
            "base.k",
        )
    } == {
        "top": 4,
        "top.nested": 5,
        "top.quoted key": 6,
        "top.single": 7,
        "notes": 8,
        "layers": 11,
        "layers.0.width": 12,
        "layers.0.act": 13,
        "layers.1.width": 14,
        "layers.1.sub.0.deep": 16,
        "flow.a": 17,
        "flow.b.c": 17,
        "flow.d.1.e": 17,
        "multi.f": 19,
        "multi.g": 20,
        "long": 21,
        "base.k": 26,
    }
    assert lines["dup"] is None  # ambiguous
    for absent in ("notes.fake", "fake", "continued", "long.continued", "alias.k", "second", "comment"):
        assert absent not in lines


def test_toml_key_lines_follow_tables_dotted_keys_arrays_of_tables_and_inline_values():
    text = '''\
title = "x"  # comment = no
owner.name = "me"
"quoted.key" = 1
text = """
fake = 1
"""
nums = [
  1,
  {inner = 2},
]

[model]
width = 64
opt = { lr = 0.1, sched = { gamma = 0.5 } }

[model.head]
size = 3

[[runs]]
name = "a"

[runs.extra]
seed = 1

[[runs]]
name = "b"
'''
    lines = key_lines(text, "pyproject.toml")
    assert {
        k: lines.get(k)
        for k in (
            "title",
            "owner.name",
            "quoted.key",
            "text",
            "nums",
            "nums.1.inner",
            "model",
            "model.width",
            "model.opt.lr",
            "model.opt.sched.gamma",
            "model.head.size",
            "runs.0.name",
            "runs.0.extra.seed",
            "runs.1.name",
        )
    } == {
        "title": 1,
        "owner.name": 2,
        "quoted.key": 3,
        "text": 4,
        "nums": 7,
        "nums.1.inner": 9,
        "model": 12,
        "model.width": 13,
        "model.opt.lr": 14,
        "model.opt.sched.gamma": 14,
        "model.head.size": 17,
        "runs.0.name": 20,
        "runs.0.extra.seed": 23,
        "runs.1.name": 26,
    }
    assert "fake" not in lines and "no" not in lines


def test_json_key_lines_follow_objects_arrays_and_strings_with_braces():
    text = (
        '{\n  "a": {"b": 1,\n    "c": "{not: a key}"},\n'
        '  "list": [\n    {"d": 2},\n    {"d": 3}\n  ],\n  "a": 0\n}\n'
    )
    lines = key_lines(text, "x.json")
    assert lines == {"a": None, "a.b": 2, "a.c": 3, "list": 4, "list.0.d": 5, "list.1.d": 6}
    assert key_lines("[1, 2", "broken.json") == {}
