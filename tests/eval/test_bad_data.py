"""A data file that is not what it says is a ``DatasetError`` naming where, never a traceback.

Files written here, read by the loaders ``tether eval`` uses.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tether.core.errors import DatasetError
from tether.eval.bfcl import load
from tether.eval.dataset import load_cases

QUESTION = [[{"role": "user", "content": "What is 2 times 3?"}]]
FUNCTION = {"name": "multiply", "description": "Multiply.", "parameters": {"type": "dict", "properties": {}}}


def bfcl_file(tmp_path: Path, entry: dict[str, object] | bytes) -> Path:
    path = tmp_path / "BFCL_v4_simple_python.json"
    path.write_bytes(entry if isinstance(entry, bytes) else json.dumps(entry).encode() + b"\n")
    answers = tmp_path / "possible_answer"
    answers.mkdir(exist_ok=True)
    (answers / path.name).write_text(json.dumps({"id": "c1", "ground_truth": [{"multiply": {}}]}) + "\n")
    return path


@pytest.mark.parametrize(
    ("entry", "said"),
    [
        (b'{"id": "c1", "question": \xff}\n', "not UTF-8 text"),
        (b'{"id": "c1", "question": ' + b"[" * 5000 + b"]" * 5000 + b"}\n", "nested more than"),
        ({"id": "c1", "question": [["What is 2 times 3?"]], "function": [FUNCTION]}, "must be an object with a role"),
        ({"id": "c1", "question": [[{"content": "hi"}]], "function": [FUNCTION]}, "must be an object with a role"),
        ({"id": "c1", "question": QUESTION, "function": ["multiply"]}, "each function document must be an object"),
    ],
)
def test_a_bfcl_file_that_is_not_one_is_a_dataset_error(
    tmp_path: Path, entry: dict[str, object] | bytes, said: str
) -> None:
    with pytest.raises(DatasetError, match=said):
        load(bfcl_file(tmp_path, entry))


@pytest.mark.parametrize(
    ("line", "said"),
    [
        (b'{"id": "a", "prompt": "\xff"}\n', "not UTF-8 text"),
        (b'{"id": "a", "prompt": ' + b"[" * 5000 + b"]" * 5000 + b"}\n", "nested more than"),
    ],
)
def test_a_tether_dataset_that_is_not_one_is_a_dataset_error(tmp_path: Path, line: bytes, said: str) -> None:
    path = tmp_path / "cases.jsonl"
    path.write_bytes(line)
    with pytest.raises(DatasetError, match=said):
        load_cases(path)
