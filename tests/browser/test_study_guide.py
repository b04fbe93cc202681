"""The study guide's quizzes work in the static page, with the network blocked: a reader
types or picks an answer, presses Check, and the page says right or wrong (and shows the
worked answer once right, or when asked after a wrong try)."""

from __future__ import annotations

from urllib.parse import urljoin

from allreduce import cost
from allreduce.study.quizzes import quizzes

from .conftest import requests_that_left
from .test_book_in_browser import console_errors, open_page


def _quiz(driver, name: str):
    return driver.find_element("css selector", f"#quiz-{name}")


def _state(driver, box) -> dict:
    return driver.execute_script(
        "const box = arguments[0];"
        "return {feedback: box.querySelector('.quiz-feedback').textContent,"
        "        explained: getComputedStyle(box.querySelector('.quiz-explanation')).display"
        "                   !== 'none',"
        "        show: !box.querySelector('.quiz-show').hidden};", box)


def test_a_reader_answers_quizzes(chromium, book_site):
    root, _ = book_site
    open_page(chromium, urljoin(root, "studyguide/review_algorithms.html"))
    steps = cost.terms("ring", 8, 1.0).steps  # what the library says the ring takes
    box = _quiz(chromium, "ring-steps")
    chromium.execute_script("arguments[0].scrollIntoView({block: 'center'})", box)
    field = box.find_element("css selector", "input[name=answer]")
    check = box.find_element("css selector", "button[type=submit]")

    assert _state(chromium, box) == {"feedback": "", "explained": False, "show": False}
    field.send_keys(f"{steps - 1:g}")
    check.click()
    wrong = _state(chromium, box)
    assert wrong["feedback"].startswith("Not quite") and not wrong["explained"], wrong
    assert wrong["show"], "a wrong answer offers the worked answer"

    field.clear()
    field.send_keys(f"{steps:g}")
    check.click()
    right = _state(chromium, box)
    assert right["feedback"] == "Right!" and right["explained"], right
    assert f"{steps:g}" in box.find_element("css selector", ".quiz-explanation").text

    # a multiple-choice quiz: the library's answer is right, another choice is not
    (choice,) = [q for q in quizzes() if q.id == "small-message"]
    box = _quiz(chromium, choice.id)
    chromium.execute_script("arguments[0].scrollIntoView({block: 'center'})", box)
    other = next(c for c in choice.choices if c != choice.answer)
    for pick, verdict in [(other, "Not quite"), (choice.answer, "Right!")]:
        box.find_element("css selector", f"input[type=radio][value='{pick}']").click()
        box.find_element("css selector", "button[type=submit]").click()
        assert _state(chromium, box)["feedback"].startswith(verdict), pick

    assert not console_errors(chromium)
    assert not requests_that_left(chromium.get_log("performance"))
