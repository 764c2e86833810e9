"""The knowledge base: real model, real files. The sample articles are indexed once per module."""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from tether.core.errors import ConfigurationError
from tickets_app import kb as kb_module
from tickets_app.kb import KnowledgeBase, Snippet, index_folder, split_sections

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "kb"
PASSWORD_DOC = "account/password-reset.md"


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory) -> tuple[kb_module.IndexStats, Path]:
    folder = tmp_path_factory.mktemp("kb-docs")
    shutil.copytree(EXAMPLES, folder, dirs_exist_ok=True)
    index = tmp_path_factory.mktemp("kb-index") / "kb.npz"
    return index_folder(folder, index), folder


@pytest.fixture(scope="module")
def kb(indexed: tuple[kb_module.IndexStats, Path]) -> KnowledgeBase:
    return KnowledgeBase.open(indexed[0].index_path)


def kb_tokens(kb: KnowledgeBase) -> set[str]:
    return {t for c in kb._chunks for t in kb_module._tokens(f"{c.heading} {c.text}")}


# -- indexing --------------------------------------------------------------------------------------


def test_index_covers_every_article(indexed: tuple[kb_module.IndexStats, Path], kb: KnowledgeBase) -> None:
    stats, _ = indexed
    assert stats.documents == len(list(EXAMPLES.rglob("*.md"))) == 8
    assert stats.chunks == len(kb) >= stats.sections >= 8 * 3
    sources = {c.source for c in kb._chunks}
    assert sources == {p.relative_to(EXAMPLES).as_posix() for p in EXAMPLES.rglob("*.md")}
    # Written beside its final name and renamed: nothing else is left in the directory.
    assert [p.name for p in stats.index_path.parent.iterdir()] == ["kb.npz"]


def test_index_is_plain_arrays_without_pickle(indexed: tuple[kb_module.IndexStats, Path]) -> None:
    with np.load(indexed[0].index_path, allow_pickle=False) as data:
        assert set(data.files) == {"meta", "embeddings"}
        embeddings = data["embeddings"]
    assert embeddings.dtype == np.float32 and embeddings.shape == (indexed[0].chunks, 384)
    assert np.allclose(np.linalg.norm(embeddings, axis=1), 1.0, atol=1e-4)


# -- searching -------------------------------------------------------------------------------------


def test_question_finds_the_section_that_answers_it(kb: KnowledgeBase) -> None:
    hits = kb.search("How do I reset my password if the email link expired?", top_k=3)
    top = hits[0]
    assert isinstance(top, Snippet)
    assert (top.source, top.heading) == (PASSWORD_DOC, "Resetting your password > If the link expired")
    assert "30 minutes" in top.text
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_paraphrase_without_a_shared_word_is_found_by_meaning(kb: KnowledgeBase) -> None:
    query = "Can't recall my login secret"
    # Not one word of the query occurs anywhere in the knowledge base: BM25 has nothing to go on.
    assert not set(kb_module._tokens(query)) & kb_tokens(kb)
    hits = kb.search(query, top_k=3)
    assert hits[0].source == PASSWORD_DOC


def test_opaque_error_code_is_found_by_keyword(kb: KnowledgeBase) -> None:
    query = "RMA-0093"
    target = ("orders/returns.md", "Returns and exchanges > Starting a return")
    # The embedding alone ranks other chunks above the one holding the code ...
    chunks = kb._chunks
    assert kb._embeddings is not None
    dense = np.argsort(-(kb._embeddings @ kb_module._embed([query])[0]))
    assert (chunks[dense[0]].source, chunks[dense[0]].heading) != target
    # ... and the keyword half brings it to the top.
    top = kb.search(query, top_k=3)[0]
    assert (top.source, top.heading) == target
    assert "RMA-0093" in top.text


@pytest.mark.parametrize("top_k", [1, 3, 10])
def test_top_k_is_respected(kb: KnowledgeBase, top_k: int) -> None:
    assert len(kb.search("refund for a damaged parcel", top_k=top_k)) == top_k


def test_top_k_below_one_is_refused(kb: KnowledgeBase) -> None:
    with pytest.raises(ValueError, match="top_k"):
        kb.search("refund", top_k=0)


def test_identical_chunks_are_one_answer(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    shutil.copy(EXAMPLES / PASSWORD_DOC, docs / "a.md")
    shutil.copy(EXAMPLES / PASSWORD_DOC, docs / "b.md")
    stats = index_folder(docs, tmp_path / "kb.npz")
    kb = KnowledgeBase.open(stats.index_path)
    hits = kb.search("reset link expired", top_k=10)
    assert len(hits) == stats.chunks // 2
    assert len({h.text for h in hits}) == len(hits)


def test_empty_folder_gives_an_empty_index(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "notes.txt").write_text("not markdown")
    stats = index_folder(tmp_path / "docs", tmp_path / "out" / "kb.npz")
    assert (stats.documents, stats.chunks) == (0, 0)
    kb = KnowledgeBase.open(stats.index_path)
    assert len(kb) == 0
    assert kb.search("reset my password", top_k=5) == []


def test_no_knowledge_base_configured_finds_nothing() -> None:
    assert KnowledgeBase.empty().search("reset my password", top_k=5) == []


# -- errors a user can cause -----------------------------------------------------------------------


def test_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="folder not found"):
        index_folder(tmp_path / "nope", tmp_path / "kb.npz")
    assert not (tmp_path / "kb.npz").exists()


def test_file_that_is_not_utf8(tmp_path: Path) -> None:
    (tmp_path / "latin1.md").write_bytes("# Café\n\nCrème brûlée".encode("latin-1"))
    message = r"not UTF-8 text: .*latin1\.md \(invalid continuation byte at byte 5\)"  # the é of "Café"
    with pytest.raises(ConfigurationError, match=message):
        index_folder(tmp_path, tmp_path / "kb.npz")


def test_missing_index(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="index not found"):
        KnowledgeBase.open(tmp_path / "kb.npz")


@pytest.mark.parametrize("damage", ["garbage", "truncated", "no-meta", "bad-json", "pickled", "wrong-shape"])
def test_damaged_index(indexed: tuple[kb_module.IndexStats, Path], tmp_path: Path, damage: str) -> None:
    path = tmp_path / "kb.npz"
    good = indexed[0].index_path.read_bytes()
    meta = np.frombuffer(b'{"format": "tether-kb", "version": 1, "chunks": []}', dtype=np.uint8)
    if damage == "garbage":
        path.write_bytes(b"\x00not an index\xff" * 10)
    elif damage == "truncated":
        path.write_bytes(good[: len(good) // 2])
    elif damage == "no-meta":
        np.savez(path, embeddings=np.zeros((0, 0), dtype=np.float32))
    elif damage == "bad-json":
        np.savez(path, meta=np.frombuffer(b"{not json", dtype=np.uint8), embeddings=np.zeros((0, 0)))
    elif damage == "pickled":
        np.savez(path, meta=np.array([{"format": "tether-kb"}], dtype=object), embeddings=np.zeros((0, 0)))
    elif damage == "wrong-shape":
        np.savez(path, meta=meta, embeddings=np.zeros((3, 384), dtype=np.float32))
    assert zipfile.is_zipfile(path) == (damage not in ("garbage", "truncated"))
    with pytest.raises(ConfigurationError, match="unreadable; rebuild it"):
        KnowledgeBase.open(path)


# -- structure -------------------------------------------------------------------------------------


def test_sections_keep_their_heading_path() -> None:
    text = "intro line\n# Title\n\n## One\nfirst\n### Deeper\ndeep\n```sh\n# not a heading\n```\n## Two ##\nsecond\n"
    assert split_sections(text) == [
        ("", "intro line"),
        ("Title > One", "first"),
        ("Title > One > Deeper", "deep\n```sh\n# not a heading\n```"),
        ("Title > Two", "second"),
    ]


def test_long_sections_are_chunked_with_overlap() -> None:
    words = [f"word{i:04d}" for i in range(400)]  # ~3,600 characters
    chunks = kb_module._chunk_text(" ".join(words))
    assert len(chunks) >= 4
    assert all(len(c) <= kb_module.CHUNK_CHARS for c in chunks)
    for before, after in itertools.pairwise(chunks):
        assert after.split()[0] in before.split()  # consecutive chunks share text
    assert {w for c in chunks for w in c.split()} == set(words)  # and nothing is lost


def test_import_does_not_load_torch() -> None:
    code = (
        "import sys, tickets_app.kb\n"
        "heavy = sorted(m for m in ('torch', 'sentence_transformers', 'transformers', 'numpy') if m in sys.modules)\n"
        "print(','.join(heavy))\n"
    )
    example = Path(__file__).resolve().parents[2] / "examples" / "tickets"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(example), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == ""
