"""The student's path through JupyterLab: ``make lab`` (as root too) opens the student copy of
a lab; in headless Chromium the student clears its outputs, writes an exercise's solution
into the stub's cell, and runs every cell from the Run menu; the engines start, and the
check cell prints its verdict.  The next exercise, still a stub, stops the run with the
check's message, as a student would see it."""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
from conftest import ROOT, child_env

from allreduce import grading

from .conftest import SCREENSHOTS, requests_that_left, start_chromium, write_screenshot_index

LAB = "10_data_parallel"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for(predicate, timeout: float, step: float = 0.25):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    return predicate()


def _cells(driver) -> list:
    return driver.find_elements("css selector", ".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell")


def _output(driver, index: int) -> str:
    return driver.execute_script(
        "const cells = document.querySelectorAll("
        "  '.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell');"
        "const out = cells[arguments[0]] && cells[arguments[0]].querySelector('.jp-OutputArea');"
        "return out ? out.textContent : '';", index)


def _menu(driver, menu: str, label: str) -> None:
    """Open a menu of the menu bar and click the item that says ``label``, as a person would."""
    bar = _wait_for(lambda: [item for item in driver.find_elements(
        "css selector", ".lm-MenuBar-item") if item.text.strip() == menu], timeout=30)
    assert bar, f"no {menu} menu"
    bar[0].click()

    def item():
        return [e for e in driver.find_elements("css selector", ".lm-Menu-item")
                if e.text.strip().startswith(label)]

    found = _wait_for(item, timeout=10)
    assert found, f"no {label!r} in the {menu} menu: " + " | ".join(
        e.text.strip() for e in driver.find_elements("css selector", ".lm-Menu-item"))
    found[0].click()


def _type_into_cell(driver, index: int, text: str) -> None:
    """Select the cell's editor, select all of it and type ``text`` over it (as one input,
    the way a paste arrives, so the editor's auto-indent leaves it as written)."""
    cell = _cells(driver)[index]
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", cell)
    editor = cell.find_element("css selector", ".cm-content")
    editor.click()
    driver.execute_script(
        "const ed = arguments[0]; ed.focus();"
        "document.execCommand('selectAll', false, null);"
        "document.execCommand('insertText', false, arguments[1]);", editor, text)


def test_make_lab_runs_a_student_lab_in_jupyterlab(browser_paths, selenium_manager_tripwire,
                                                  tmp_path):
    key = nbformat.read(ROOT / "labs" / f"{LAB}.ipynb", as_version=4)
    student = grading.student_copy(key)
    marks = [grading.role(cell) for cell in student.cells]
    first = grading.exercises(key)[0]
    solution_at = marks.index((first, "solution"))
    check_at = next(i for i, mark in enumerate(marks) if mark and mark[:2] == (first, "check"))
    solution = next(cell.source for cell in key.cells if grading.role(cell) == (first, "solution"))
    engines_at = next(i for i, cell in enumerate(student.cells) if "lab.start(" in cell.source)
    assert engines_at < solution_at < check_at

    port, token = _free_port(), secrets.token_hex(16)
    home = tmp_path / "home"
    env = child_env() | {
        "JUPYTER_CONFIG_DIR": str(home / "config"), "JUPYTER_DATA_DIR": str(home / "data"),
        "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
        "JUPYTERLAB_SETTINGS_DIR": str(home / "settings"),
        "JUPYTERLAB_WORKSPACES_DIR": str(home / "workspaces"),
        "IPYTHONDIR": str(home / "ipython"),
    }
    venv = Path(sys.prefix)
    lab_args = (f"--no-browser --ServerApp.ip=127.0.0.1 --ServerApp.port={port} "
                f"--IdentityProvider.token={token} --LabApp.news_url=None "
                "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate")
    # make lab, as the README says, with the student copies written into a folder of the
    # test's; -o: the environment is the one running this test, never reinstalled here
    server = subprocess.Popen(
        ["make", "--no-print-directory", "-o", f"{venv}/.installed", "lab",
         f"VENV={venv}", f"STUDENT={tmp_path / 'student'}", f"LAB_ARGS={lab_args}"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True)
    log: list[str] = []
    driver = None
    try:
        def up():
            if server.poll() is not None:
                return True
            try:
                with urllib.request.urlopen(
                        f"http://127.0.0.1:{port}/api/status?token={token}", timeout=2) as r:
                    return r.status == 200
            except OSError:
                return False

        assert _wait_for(up, timeout=90), "JupyterLab did not start in 90 s"
        assert server.poll() is None, server.stdout.read()[-3000:]
        assert (tmp_path / "student" / f"{LAB}.ipynb").exists()  # made because it was missing

        driver = start_chromium(browser_paths, tmp_path / "chromium")
        driver.set_window_size(1400, 1000)
        driver.get(f"http://127.0.0.1:{port}/lab/tree/{LAB}.ipynb?token={token}")
        assert _wait_for(lambda: len(_cells(driver)) == len(student.cells), timeout=90), \
            f"the notebook did not open: {len(_cells(driver))} cells"
        assert "NotImplementedError" in _cells(driver)[solution_at].text  # the stub

        _menu(driver, "Edit", "Clear Outputs of All Cells")
        assert _wait_for(lambda: not _output(driver, check_at).strip(), timeout=10)
        _type_into_cell(driver, solution_at, solution)
        _menu(driver, "Run", "Run All Cells")

        started = _wait_for(lambda: "4 engines" in _output(driver, engines_at)
                            and _output(driver, engines_at), timeout=180)
        assert started, f"the engines did not start: {_output(driver, engines_at)!r}"
        verdict = _wait_for(lambda: f"{first}: correct" in _output(driver, check_at)
                            and _output(driver, check_at), timeout=180)
        assert verdict, f"the check cell said: {_output(driver, check_at)!r}"
        # the next exercise is still a stub: its check stops the run with its message
        second = grading.exercises(key)[1]
        second_check = next(i for i, mark in enumerate(marks)
                            if mark and mark[:2] == (second, "check"))
        stopped = _wait_for(lambda: "NotImplementedError" in _output(driver, second_check)
                            and _output(driver, second_check), timeout=120)
        assert stopped and second in stopped, _output(driver, second_check)
        assert not requests_that_left(driver.get_log("performance"))
        assert not selenium_manager_tripwire.exists()
    finally:
        if driver is not None:  # what the student saw, for a person to look at
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            cells = _cells(driver)
            if len(cells) > check_at:
                driver.execute_script("arguments[0].scrollIntoView({block: 'center'})",
                                      cells[check_at])
            driver.save_screenshot(str(SCREENSHOTS / f"jupyterlab__{LAB}.png"))
            write_screenshot_index()
            driver.quit()
        # the server stops its kernels, whose exit stops their engines (allreduce.lab)
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGTERM)
            try:
                server.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait(10)
        log.append(server.stdout.read() if server.stdout else "")
        print("make lab's output:\n", log[0][-6000:])  # shown when the test fails
