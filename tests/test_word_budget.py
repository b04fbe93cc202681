"""Each chapter is read in one sitting: its prose stays within a budget of words
(chapters 10-60 at most 2,500, 65-80 at most 3,000; the library page and the benchmark
appendix hold the machinery and have none).

The count: the chapter's Markdown source without its code cells (```{code-cell} ... ```)
and without plain code fences (a fence with no {directive}); directive option lines
(``:label: ...``) dropped; directive bodies (exercises, solutions, admonitions), math,
roles and labels kept; then every token matching ``[A-Za-z0-9][\\w'’-]*``.
"""

from __future__ import annotations

import re

import pytest

BUDGETS = {
    "10_data_parallel": 2500, "20_parameter_server": 2500, "30_naive_allreduce": 2500,
    "40_tree_allreduce": 2500, "50_ring_allreduce": 2500, "60_choosing": 2500,
    "65_beyond_ring": 3000, "70_nccl": 3000, "75_sparse": 3000, "80_capstone": 3000,
}
TOKEN = re.compile(r"[A-Za-z0-9][\w'’-]*")
FENCE = re.compile(r"^\s*(`{3,}|~{3,})(.*)$")
OPTION = re.compile(r"^\s*:[\w-]+:(\s|$)")


def prose(text: str) -> str:
    """The chapter's prose by the rule in the module docstring."""
    kept, stack = [], []          # stack: (fence, drop?) of each open fence
    in_options = False
    for line in text.splitlines():
        match = FENCE.match(line)
        if match:
            fence, info = match.group(1), match.group(2).strip()
            if stack and fence[0] == stack[-1][0][0] and len(fence) >= len(stack[-1][0]) \
                    and not info:
                stack.pop()       # a closing fence
                in_options = False
                continue
            if not (stack and stack[-1][1]):   # inside a dropped block, nested fences stay dropped
                directive = info.startswith("{")
                drop = not directive or info.startswith("{code-cell}")
                stack.append((fence, drop))
                in_options = directive and not drop
                continue
            stack.append((fence, True))
            continue
        if stack and stack[-1][1] or any(drop for _, drop in stack):
            continue
        if in_options and OPTION.match(line):
            continue
        in_options = False
        kept.append(line)
    return "\n".join(kept)


def words(text: str) -> int:
    return len(TOKEN.findall(prose(text)))


@pytest.mark.parametrize("chapter", sorted(BUDGETS))
def test_chapter_prose_within_its_budget(root, chapter):
    count = words((root / "chapters" / f"{chapter}.md").read_text(encoding="utf-8"))
    assert count <= BUDGETS[chapter], (
        f"{chapter} has {count} words of prose, its budget is {BUDGETS[chapter]}: move library "
        "internals to chapters/90_library.md or 95_benchmark_record.md and link them")


def test_the_count_drops_code_and_options_and_keeps_directive_bodies():
    text = ("Two words.\n```{code-cell} ipython3\nhidden = 1\n```\n```\nplain fence\n```\n"
            "````{exercise}\n:label: ex-one\nKept body here.\n```python\nnot this\n```\n````\n"
            "$$x = y$$\n")
    assert TOKEN.findall(prose(text)) == ["Two", "words", "Kept", "body", "here", "x", "y"]
