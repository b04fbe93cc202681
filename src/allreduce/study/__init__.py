"""The study guide, a part of the book: review pages, self-check quizzes, key facts.

This module is a Sphinx extension (``_config.yml`` names ``allreduce.study`` in
``sphinx.extra_extensions``) with two directives for the study guide's pages:

``{review-questions} Part``
    every labelled review question (``{exercise}`` with a ``:label:``) of every page of the
    part called ``Part`` in ``_toc.yml``, chapter by chapter, each with a link to the question
    in its chapter (where its answer is folded away), and a link to the chapter's key-facts
    box when it has one.  The pages are read when the review page is built, and Sphinx is told
    the review page depends on them and on ``_toc.yml``: a chapter added to the part, or a
    question added to a chapter, appears with nothing else to do.

``{quizzes} Part``
    the self-check quizzes of :mod:`allreduce.study.quizzes` that belong to ``Part``: each a
    question, a box for a number or a choice of answers, and a *Check* button.  The reader's
    browser says right or wrong (``static/quiz.js``, served from the build, nothing from the
    network) and then shows the worked answer and a link to the chapter.

**Key facts.**  Every chapter closes with its key facts, five to eight things to know, in a
box: an admonition titled "Key facts" with the class ``key-facts``, labelled
``(<chapter-label>-key-facts)=``; numbers in it are computed in a hidden code cell and glued
(``myst_nb.glue``, written ``{glue:text}`name:format```), and glossary terms are linked with
``{term}``.  The review pages link to every such box.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from docutils import nodes
from docutils.parsers.rst import Directive, directives
from docutils.statemachine import StringList

from . import review
from .quizzes import Quiz, format_number, quizzes

__all__ = ["setup"]

STATIC = Path(__file__).parent / "static"


def _parse(directive: Directive, text: str, into: nodes.Element) -> None:
    """Parse ``text`` (MyST Markdown in a MyST page) into ``into``."""
    directive.state.nested_parse(StringList(text.splitlines(), source="study guide"),
                                 directive.content_offset, into)


def _shows_body(body: str) -> bool:
    """Whether an exercise's body can be repeated on the review page as it is: no glued
    values (they belong to their page), no labels or nested blocks."""
    return not any(mark in body for mark in ("{glue", "```", ":::", ")=", "{code-cell"))


class ReviewQuestions(Directive):
    """``{review-questions} Part``: the part's labelled review questions (module docstring)."""

    required_arguments = 1
    final_argument_whitespace = True

    def run(self):
        env = self.state.document.settings.env
        root = Path(env.srcdir)
        caption = self.arguments[0]
        try:
            pages = review.part_pages(root, caption)
        except ValueError as error:
            raise self.error(str(error)) from error
        env.note_dependency(str(root / "_toc.yml"))
        lines: list[str] = []
        count = 0
        for page in pages:
            if not page.path.exists():
                continue
            env.note_dependency(str(page.path))
            text = review.source_text(page.path)
            questions = review.exercises(text)
            facts = review.key_facts_labels(text)
            if not questions and not facts:
                continue
            lines += [f"### {review.title(text) or page.docname}", ""]
            links = [f"{{doc}}`the chapter </{page.docname}>`"]
            links += [f"{{ref}}`its key facts <{label}>`" for label in facts]
            lines += ["Read again: " + ", ".join(links) + ".", ""]
            for number, question in enumerate(questions, start=1):
                count += 1
                # a title is link text here: no backticks or angle brackets in it
                name = "".join(c for c in question.title if c not in "`<>") or f"Question {number}"
                body = question.body if _shows_body(question.body) else \
                    "(the question is in the chapter)"
                first, *rest = body.splitlines()
                lines += [f"{number}. **{{ref}}`{name} <{question.label}>`**: {first}"]
                lines += [f"   {line}" if line.strip() else "" for line in rest] + [""]
        if not count:
            raise self.error(f"no labelled review question in the part {caption!r}")
        container = nodes.container(classes=["review-questions"])
        _parse(self, "\n".join(lines), container)
        return [container]


class ChapterList(Directive):
    """``{chapter-list} Part, Part``: the chapters of those parts of ``_toc.yml``, numbered in
    reading order, each with a link to its key facts; ``:labs:`` adds the pages under each
    chapter (its lab).  The study paths use it, so a chapter added to the toc is on them."""

    required_arguments = 1
    final_argument_whitespace = True
    option_spec: ClassVar[dict] = {"labs": directives.flag}

    def run(self):
        env = self.state.document.settings.env
        root = Path(env.srcdir)
        env.note_dependency(str(root / "_toc.yml"))
        known = review.chapters(root)
        wanted = [c.strip() for c in self.arguments[0].split(",")]
        missing = [c for c in wanted if c not in known]
        if missing:
            raise self.error(f"_toc.yml has no part {missing}; its parts: {list(known)}")
        lines, number = [], 0
        for caption in wanted:
            for chapter, under in known[caption]:
                number += 1
                env.note_dependency(str(chapter.path))
                facts = review.key_facts_labels(review.source_text(chapter.path)) \
                    if chapter.path.exists() else []
                entry = f"{number}. {{doc}}`/{chapter.docname}` ({caption})"
                if facts:
                    entry += f"; {{ref}}`its key facts <{facts[0]}>`"
                if "labs" in self.options and under:
                    entry += "; then " + ", ".join(f"{{doc}}`/{sub.docname}`" for sub in under)
                lines.append(entry)
        container = nodes.container(classes=["chapter-list"])
        _parse(self, "\n".join(lines), container)
        return [container]


def quiz_form(quiz: Quiz) -> str:
    """The form a quiz's reader answers in (HTML), with what quiz.js checks against."""
    from html import escape

    common = (f'class="quiz-form" data-quiz="{escape(quiz.id)}" data-kind="{quiz.kind}" '
              f'data-answer="{escape(str(quiz.answer))}"')
    if quiz.kind == "number":
        field = (f'<label>Your answer <input type="text" inputmode="decimal" '
                 f'autocomplete="off" name="answer" aria-label="your answer to {escape(quiz.id)}">'
                 f'</label> {escape(quiz.unit)}')
        common += f' data-tolerance="{quiz.tolerance:g}"'
    else:
        field = "".join(
            f'<label class="quiz-choice"><input type="radio" name="answer-{escape(quiz.id)}" '
            f'value="{escape(choice)}"> {escape(choice)}</label>' for choice in quiz.choices)
    return (f"<form {common}>{field} <button type=\"submit\">Check</button> "
            f"<button type=\"button\" class=\"quiz-show\" hidden>Show the answer</button>"
            f"<p class=\"quiz-feedback\" role=\"status\" aria-live=\"polite\"></p></form>")


class Quizzes(Directive):
    """``{quizzes} Part``: the part's quizzes from :func:`allreduce.study.quizzes.quizzes`."""

    required_arguments = 1
    final_argument_whitespace = True

    def run(self):
        env = self.state.document.settings.env
        env.note_dependency(str(Path(__file__).parent / "quizzes.py"))
        caption = self.arguments[0]
        chosen = [q for q in quizzes() if q.part == caption]
        if not chosen:
            raise self.error(f"no quiz for the part {caption!r}")
        found = []
        for number, quiz in enumerate(chosen, start=1):
            box = nodes.container(classes=["quiz"], ids=[f"quiz-{quiz.id}"])
            _parse(self, f"**Quiz {number}.** {quiz.prompt}", box)
            box += nodes.raw("", quiz_form(quiz), format="html")
            answer = (f"{format_number(quiz.answer)} {quiz.unit}".strip()
                      if quiz.kind == "number" else quiz.answer)
            explanation = nodes.container(classes=["quiz-explanation"])
            _parse(self, f"**Answer: {answer}.** {quiz.explanation} "
                         f"(Read again: {{ref}}`{quiz.chapter}`.)", explanation)
            box += explanation
            found.append(box)
        return found


def _static_path(app, config) -> None:
    config.html_static_path.append(str(STATIC))


def setup(app):
    app.add_directive("review-questions", ReviewQuestions)
    app.add_directive("quizzes", Quizzes)
    app.add_directive("chapter-list", ChapterList)
    app.connect("config-inited", _static_path)
    app.add_js_file("quiz.js")
    app.add_css_file("quiz.css")
    return {"parallel_read_safe": True, "parallel_write_safe": True}
