"""The study guide (issue 16, part 5): the quizzes' answers against the library, every
chapter's key facts, the review pages gathering every labelled review question, and a
glossary whose every term some chapter links to.

The quiz answers are checked without the book (each against an independent derivation:
a replay of the real code's trace, a closed form written out here, plain arithmetic); the
rest reads the session's one build (``built_book``)."""

from __future__ import annotations

import html
import math
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from allreduce import cost
from allreduce.algorithms.auto import CANDIDATES, choose
from allreduce.study import review
from allreduce.study.quizzes import NET_100G, quizzes
from allreduce.trace import record

ROOT = Path(__file__).resolve().parent.parent
STUDIED = ("Foundations", "Algorithms", "Practice")  # the parts whose chapters teach


def _traced(algorithm: str, p: int, count: int = 5040, **options) -> cost.Terms:
    """The critical path's counts, per byte of the buffer, replayed from a trace of the
    library's own code on ``p`` thread ranks."""
    trace, _ = record(algorithm, p, count, **options)
    terms, n = trace.terms(), count * 8
    return cost.Terms(terms.steps, terms.bytes / n, terms.reduced / n)


def _expected() -> dict[str, object]:
    """What each quiz must expect, derived here without the quiz module's own code path."""
    lg = math.log2
    alpha, beta = 2e-6, 1 / 12.5e9

    def closed(algorithm, p, n):  # the chapters' formulas, written out (γ aside)
        return {"ring": 2 * (p - 1) * alpha + 2 * (p - 1) / p * n * beta,
                "tree": 2 * math.ceil(lg(p)) * (alpha + n * beta),
                "recursive_doubling": lg(p) * (alpha + n * beta)}[algorithm]

    small = {"ring": "ring", "binomial tree": "tree", "recursive doubling": "recursive_doubling"}
    nvlink = cost.NETWORKS["NVLink-class, α = 1 µs"]
    # DDP's rebuilt buckets for 100 equal tensors of 3 MiB: the first closes with one tensor
    # (3 MiB >= 1 MiB), each later one with the tensor that takes it to 25 MiB (9 of them)
    first, per_bucket = 1, math.ceil(25 / 3)
    p = 64
    return {
        "ping-pong-bandwidth": (1e6 - 8) / (53e-6 - 3e-6) / 1e9,
        "message-time": (2e-6 + 2**20 / 12.5e9) * 1e6,
        "composition": min(["reduce, then broadcast", "reduce-scatter, then all-gather"],
                           key=lambda c: _traced({"reduce, then broadcast": "reduce_broadcast",
                                                  "reduce-scatter, then all-gather": "ring"}[c],
                                                 8).bytes),
        "ring-steps": _traced("ring", 8).steps,
        "ring-bytes": _traced("ring", 8).bytes * 64,  # MB of a 64 MB gradient
        "server-bytes": _traced("parameter_server", 8, servers=1).bytes * 100,
        "doubling-steps": _traced("recursive_doubling", 6).steps,
        "busbw": 2e9 / 0.05 * 2 * 15 / 16 / 1e9,
        "small-message": min(small, key=lambda name: closed(small[name], 1024, 1024)),
        "crossover-64": alpha / beta * (2 * (p - 1) - lg(p)) / (lg(p) - 2 * (p - 1) / p) / 1024,
        "auto-choice": min(CANDIDATES, key=lambda name: nvlink.time(name, 8, 64 << 20)),
        "ddp-buckets": first + math.ceil((100 - first) / per_bucket),
        "sharded-server-bytes": _traced("parameter_server", 8, servers=8).bytes * 100,
        "naive-bytes": _traced("naive", 8).bytes * 10,
        "naive-vs-ring": _traced("naive", 16).bytes / _traced("ring", 16).bytes,
        # 10 MiB tensors: the first bucket closes with one, each later one at 30 MiB >= 25
        "ddp-buckets-large": 1 + math.ceil(39 / 3),
        # the ZeRO paper (Rajbhandari et al. 2020, section 7.2): DDP 2Ψ, stages 1-2 2Ψ, stage 3 3Ψ
        "zero3-volume": 3 * 63 / 64 * 2,
        "zero-most-bytes": "ZeRO-3 / FSDP",
        # (p-1)(h + 8k) = 2(p-1)/p * 4n with 32-byte headers, n = 2^26, p = 64
        "allgather-threshold": 100 * (8 * 2**26 / 64 - 32) / 8 / 2**26,
        "sparse-ring-disjoint": _traced_sparse_ring_disjoint() / 1e3,
        "weak-efficiency": 100 * 0.25 / (0.25 + _fastest_closed(8, 1e9)),
        "strong-efficiency": 100 * (1024 * 0.25 / 32)
                             / (64 * (16 * 0.25 / 32 + _fastest_closed(64, 1e9))),
    }


def _fastest_closed(p: int, n: float) -> float:
    """The fastest of auto's candidates on the chapters' 100 Gb/s network (γ included), from
    the closed forms of chapter "Trees" written out here, on a power of two ``p``."""
    alpha, beta, gamma, lg = 2e-6, 1 / 12.5e9, 1 / 100e9, math.log2(p)
    return min(2 * (p - 1) * alpha + 2 * (p - 1) / p * n * beta + (p - 1) / p * n * gamma,
               2 * lg * alpha + 2 * (p - 1) / p * n * beta + (p - 1) / p * n * gamma,
               lg * (alpha + n * beta + n * gamma))


def _traced_sparse_ring_disjoint(p: int = 8, per_chunk: int = 1000) -> int:
    """Bytes on the critical path of the real sparse ring's trace, ``p`` ranks with disjoint
    supports of ``per_chunk`` pairs in each of the ``p`` chunks (far below the dense switch)."""
    import numpy as np

    from allreduce.viz.messages import record_sparse

    width = 100 * per_chunk  # a chunk's length
    vectors = [(np.concatenate([c * width + r * per_chunk + np.arange(per_chunk)
                                for c in range(p)]), np.ones(p * per_chunk, np.float32))
               for r in range(p)]
    return record_sparse("sparse_ring", vectors, p * width).terms().bytes


def test_every_quiz_answer_is_the_librarys():
    expected = _expected()
    found = {quiz.id: quiz for quiz in quizzes()}
    assert set(found) == set(expected), "every quiz needs its independent check here"
    for name, quiz in found.items():
        if quiz.kind == "choice":
            assert quiz.answer == expected[name] and quiz.answer in quiz.choices, name
        else:
            assert math.isclose(quiz.answer, expected[name], rel_tol=1e-9), \
                (name, quiz.answer, expected[name])
    # the numbers are the library's: auto's rule and the cost module agree with the above
    assert found["auto-choice"].answer == choose(64 << 20, 8, cost.NETWORKS[
        "NVLink-class, α = 1 µs"])
    assert math.isclose(found["crossover-64"].answer * 1024,
                        cost.crossover(NET_100G, "recursive_doubling", "ring", 64), rel_tol=1e-6)


def test_quizzes_are_well_formed():
    found = quizzes()
    assert len({q.id for q in found}) == len(found)
    assert {q.part for q in found} == set(STUDIED), "each part's review page has quizzes"
    for quiz in found:
        assert quiz.prompt and quiz.explanation, quiz.id
        assert quiz.kind == "choice" or isinstance(quiz.answer, float | int), quiz.id
        assert not quiz.choices or len(set(quiz.choices)) == len(quiz.choices) >= 2, quiz.id


def test_every_chapter_has_at_least_two_quizzes():
    """Issue 22: a quiz for every chapter of the parts that teach, at least two each, and
    each quiz on the review page of its chapter's part."""
    counts: dict[str, int] = {}
    for quiz in quizzes():
        counts[quiz.chapter] = counts.get(quiz.chapter, 0) + 1
    seen = 0
    for caption, chapters in review.chapters(ROOT).items():
        if caption not in STUDIED:
            continue
        for chapter, _ in chapters:
            label = re.match(r"\s*(?:---.*?---\s*)?\(([\w-]+)\)=", review.source_text(chapter.path),
                             re.DOTALL).group(1)
            assert counts.get(label, 0) >= 2, f"{label} has {counts.get(label, 0)} quizzes"
            assert all(q.part == caption for q in quizzes() if q.chapter == label), label
            seen += 1
    assert seen >= 10


def test_exercises_are_found_in_any_fence():
    text = """
```{exercise} Steps
:label: a-q1
How many?
```

```{solution} a-q1
:class: dropdown
Six.
```

::::{exercise}
:label: a-q2
:class: hard

Why $p - 1$?

```python
x = 1
```
::::

```{exercise} Unlabelled
Not gathered.
```
"""
    found = review.exercises(text)
    assert [(e.label, e.title) for e in found] == [("a-q1", "Steps"), ("a-q2", "")]
    assert found[1].body.startswith("Why $p - 1$?") and "x = 1" in found[1].body


def _studied_pages():
    return [(caption, page) for caption, pages in review.parts(ROOT).items()
            if caption in STUDIED for page in pages if page.path.exists()]


def test_every_chapter_closes_with_its_key_facts():
    """Every chapter of the parts that teach (not its lab) has a key-facts box: a
    ``(...-key-facts)=`` label on an admonition of class key-facts with 5 to 8 facts."""
    checked = 0
    for caption, chapters in review.chapters(ROOT).items():
        if caption not in STUDIED:
            continue
        for chapter, _ in chapters:
            text = review.source_text(chapter.path)
            box = re.search(r"^\(([\w-]+-key-facts)\)=\n(:{3,}|`{3,})\{admonition\} Key facts\n"
                            r":class: key-facts[^\n]*\n(.*?)^\2\s*$", text, re.MULTILINE | re.DOTALL)
            assert box, f"{chapter.docname} has no key-facts box (see chapters/10's comment)"
            facts = re.findall(r"^\* ", box.group(3), re.MULTILINE)
            assert 5 <= len(facts) <= 8, f"{chapter.docname}: {len(facts)} key facts"
            checked += 1
    assert checked >= 8


class _Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.hrefs: list[str] = []
        self.ids: set[str] = set()
        self.forms: list[dict[str, str]] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if attrs.get("id"):
            self.ids.add(attrs["id"])
        if tag == "a" and attrs.get("href"):
            self.hrefs.append(html.unescape(attrs["href"]))
        if tag == "form" and "quiz-form" in (attrs.get("class") or ""):
            self.forms.append(attrs)


def _read(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(errors="replace"))
    return page


@pytest.fixture(scope="module")
def site(built_book) -> Path:
    assert built_book.returncode == 0, built_book.output[-4000:]
    return built_book.html


def _review_page(caption: str) -> str:
    """The study-guide page that gathers the part ``caption``."""
    found = [p for p in sorted((ROOT / "studyguide").glob("*.md"))
             if re.search(r"\{review-questions\}\s+" + re.escape(caption) + r"\s*$",
                          p.read_text(), re.MULTILINE)]
    assert len(found) == 1, f"one review page for the part {caption!r}, found {found}"
    return f"studyguide/{found[0].stem}"


def test_review_pages_gather_every_labelled_question(site):
    """Every labelled exercise of every page of each part that has any (65, 75 and any
    chapter yet to come included) is linked from that part's review page, as is every
    key-facts box; and each quiz of the part is there with the library's answer."""
    by_part: dict[str, list[str]] = {}
    facts: dict[str, list[str]] = {}
    for caption, page in _studied_pages():
        text = review.source_text(page.path)
        by_part.setdefault(caption, []).extend(e.label for e in review.exercises(text))
        facts.setdefault(caption, []).extend(review.key_facts_labels(text))
    assert sum(map(len, by_part.values())) >= 37
    for caption, labels in by_part.items():
        docname = _review_page(caption)
        page = _read(site / f"{docname}.html")
        targets = {href.split("#", 1)[1] for href in page.hrefs if "#" in href}
        missing = [label for label in labels + facts[caption] if label not in targets]
        assert not missing, f"{docname} does not link {missing}"
        answers = {form["data-quiz"]: form["data-answer"] for form in page.forms}
        mine = {q.id: q for q in quizzes() if q.part == caption}
        assert set(answers) == set(mine), docname
        for name, quiz in mine.items():
            assert answers[name] == str(quiz.answer), (name, answers[name], quiz.answer)
            assert f"quiz-{name}" in page.ids


def test_every_glossary_term_is_linked_from_a_chapter(site):
    glossary = (site / "studyguide" / "glossary.html").read_text()
    terms = dict(re.findall(r'<dt id="(term-[^"]*)"[^>]*>(.*?)<', glossary, re.DOTALL))
    names = {html.unescape(name).strip() for name in terms.values()}
    wanted = {"allreduce", "reduce-scatter", "all-gather", "busbw", "algbw", "α", "β", "γ",
              "fill-in", "Top-k", "error feedback", "critical path"}
    assert wanted <= names, wanted - names
    linked: dict[str, set[str]] = {}
    for path in sorted((site / "chapters").glob("*.html")):
        for href in _read(path).hrefs:
            if "glossary.html#term-" in href:
                linked.setdefault(href.split("#", 1)[1], set()).add(path.stem)
    unlinked = sorted(html.unescape(terms[t]) for t in terms if t not in linked)
    assert not unlinked, f"glossary terms no chapter links to: {unlinked}"
    assert len(terms) >= 40


def test_no_role_is_left_unrendered(site):
    """A glued number or a glossary link written wrongly (inside code backticks, say) shows
    as raw MyST in the page: none does, in any page."""
    left = []
    for path in sorted(site.rglob("*.html")):
        text = re.sub(r"<(script|style)\b.*?</\1>", "", path.read_text(), flags=re.DOTALL)
        text = html.unescape(re.sub(r"<[^>]+>", "", text))
        left += [f"{path.relative_to(site)}: {m.group(0)}" for m in
                 re.finditer(r"\{(?:glue(?::\w+)?|term|ref|doc|numref|cite)\}`?[^\n]{0,30}",
                             text)]
    assert not left, left[:10]
