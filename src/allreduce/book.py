"""The published book: labs as their student copies, and publishing with ghp-import.

**The solutions policy.**  The notebooks in ``labs/`` are the instructors' keys (solution
regions, committed outputs for nbval).  The book a reader gets shows each lab as its student
copy (:func:`allreduce.grading.student_copy`: every solution region replaced by a
``NotImplementedError`` stub, every other cell and output kept), so that nothing under
``_build/html`` holds the key: not the page, not the search index, not ``_sources/``, not the
download button.  This module is a Sphinx extension (``_config.yml`` names it in
``sphinx.extra_extensions``) that does that:

* ``source-read``: a notebook with solution cells is handed to the parser (myst-nb) as its
  student copy; its solution cells lose the ``hide-input`` tag, since a stub hides nothing;
* ``build-finished``: Sphinx copies each page's file from disk into ``_sources/`` (the
  download button's target); the copies of the labs are overwritten with the student copies;
* ``html-page-context``: the launch buttons (Binder, JupyterHub) stay on the lab pages only,
  where they open the lab's student copy in JupyterLab (``repository.branch`` in
  ``_config.yml`` is the branch that :func:`publish` fills with the student copies), once
  ``repository.url`` is a course's own (none while it is the placeholder); and
  each inline script appears once (see :func:`_inline_scripts_once`).

**Publishing** (``make publish``), as jupyter-book's docs describe it: ``ghp-import`` puts
``_build/html`` onto the ``gh-pages`` branch (with ``.nojekyll``) and pushes it; and the
repository's files, with every lab replaced by its student copy, go onto the ``student``
branch that the launch buttons open.  Both are made in a throwaway git repository and
pushed to the remote, so the checkout's own branches are never touched; a remote that
holds the branches already gets a commit on top of them.  Point ``REMOTE`` at a repository
that students may read and the keys stay with the instructors.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from allreduce import grading

__all__ = ["has_solutions", "publish", "published_notebook", "setup"]


def _nbformat():
    import nbformat

    return nbformat


def has_solutions(nb) -> bool:
    """Whether notebook ``nb`` holds solution cells (it is an instructor's lab)."""
    return any((grading.role(cell) or ("", ""))[1] == "solution" for cell in nb.cells)


def published_notebook(nb):
    """The notebook a reader gets for the instructor's lab ``nb``: its student copy, with
    the stubs shown (their ``hide-input`` tag, meant to fold the solutions away, removed)."""
    student = grading.student_copy(nb)
    for cell in student.cells:
        if (grading.role(cell) or ("", ""))[1] == "solution":
            tags = [t for t in cell.metadata.get("tags", []) if t != "hide-input"]
            if tags:
                cell.metadata["tags"] = tags
            else:
                cell.metadata.pop("tags", None)
    if any(grading.BEGIN in cell.source or grading.END in cell.source for cell in student.cells):
        raise ValueError("a solution marker outside the solution cells would be published")
    return student


# --- the Sphinx extension --------------------------------------------------------------------


def _lab_notebook(app, docname: str):
    """The instructor notebook behind ``docname``, or None if the page is not one."""
    path = Path(app.env.doc2path(docname))
    if path.suffix != ".ipynb" or not path.exists():
        return None
    nb = _nbformat().read(path, as_version=4)
    return nb if has_solutions(nb) else None


def _source_read(app, docname: str, source: list[str]) -> None:
    if Path(app.env.doc2path(docname)).suffix != ".ipynb":
        return
    nbformat = _nbformat()
    nb = nbformat.reads(source[0], as_version=4)
    if has_solutions(nb):
        source[0] = nbformat.writes(published_notebook(nb))
    elif grading.BEGIN in source[0]:
        raise ValueError(f"{docname}: a {grading.BEGIN} marker outside a solution cell")


def _launch_on_labs_only(app, pagename, templatename, context, doctree) -> None:
    """No launch buttons but on the lab pages, and none at all while ``repository.url`` is
    :data:`PLACEHOLDER_REPOSITORY`: they would open a repository that does not exist."""
    buttons = context.get("header_buttons")
    placeholder = app.config.html_theme_options.get("repository_url") == PLACEHOLDER_REPOSITORY
    if buttons and (placeholder or _lab_notebook(app, pagename) is None):
        buttons[:] = [b for b in buttons if b.get("label") != "launch-buttons"]


def _inline_scripts_once(app, pagename, templatename, context, doctree) -> None:
    """Drop the second copy of an inline script from a page.

    Under jupyter-book 1.0.4 and Sphinx 7.4, an inline script that an extension adds once
    (``app.add_js_file(None, body=...)``: sphinx-thebe's ``const THEBE_JS_URL = ...``,
    sphinx-togglebutton's selector) is written twice into every page, once as it was
    registered and once from the builder's own list (the two copies differ only in a
    filename of ``None`` against ``""``).  The second ``const`` declaration is a JavaScript
    error in the reader's console ("Identifier 'THEBE_JS_URL' has already been declared"),
    which the browser tests catch.  The page's list is replaced, not changed in place."""
    scripts = context.get("script_files")
    if not scripts:
        return
    seen, kept = set(), []
    for script in scripts:
        attributes = getattr(script, "attributes", {})
        key = (getattr(script, "filename", script) or "", tuple(sorted(attributes.items())))
        if key not in seen:
            seen.add(key)
            kept.append(script)
    context["script_files"] = kept


def _student_sources(app, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    nbformat = _nbformat()
    sources = Path(app.outdir) / "_sources"
    for docname in sorted(app.env.found_docs):
        target = sources / f"{docname}.ipynb"
        nb = _lab_notebook(app, docname)
        if nb is not None and target.exists():
            nbformat.write(published_notebook(nb), target)


def setup(app):
    from .bibstyle import register

    register()  # the bibliography style _config.yml names (bibtex_default_style)
    app.connect("source-read", _source_read)
    app.connect("html-page-context", _launch_on_labs_only, priority=502)  # after the theme's
    app.connect("html-page-context", _inline_scripts_once, priority=900)  # after every other
    app.connect("build-finished", _student_sources)
    # a new env_version makes Sphinx read every page again, so no instructor lab survives in
    # a cached doctree from a build made before this extension
    return {"parallel_read_safe": True, "parallel_write_safe": True, "env_version": 1}


# --- publishing --------------------------------------------------------------------------------


def _git(*args: str, cwd: Path, capture: bool = False) -> str:
    run = subprocess.run(["git", *args], cwd=cwd, check=True, text=True,
                         capture_output=capture)
    return run.stdout.strip() if capture else ""


def student_tree(repo: Path, labs: list[Path], folder: Path) -> Path:
    """Write the committed files of ``repo`` (HEAD) into ``folder``, with each lab in
    ``labs`` replaced by its student copy (what the launch buttons open)."""
    folder.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "archive", "--format=tar", "HEAD"], cwd=repo,
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    nbformat = _nbformat()
    for lab in labs:
        target = folder / lab.resolve().relative_to(repo.resolve())
        nbformat.write(grading.student_copy(nbformat.read(lab, as_version=4)), target)
    return folder


def publish(html: Path, remote: str, *, repo: Path, labs: list[Path],
            pages_branch: str = "gh-pages", student_branch: str = "student",
            message: str = "Publish the book") -> None:
    """Push ``html`` (a built book) onto ``pages_branch`` of ``remote`` and the student tree
    of ``repo`` onto ``student_branch``, with ghp-import, from a throwaway repository."""
    html, repo = Path(html).resolve(), Path(repo).resolve()
    if not (html / "index.html").exists():
        raise FileNotFoundError(f"{html} holds no built book (run make book)")
    leaks = [str(p) for p in html.rglob("*") if p.is_file() and p.suffix in {".ipynb", ".html"}
             and grading.BEGIN in p.read_text(errors="replace")]
    if leaks:
        raise RuntimeError(f"the built book holds solution regions: {leaks[:5]}")
    ghp_import = Path(sys.executable).with_name("ghp-import")
    with tempfile.TemporaryDirectory(prefix="allreduce-publish-") as tmp:
        work = Path(tmp) / "repo"
        work.mkdir()
        _git("init", "-q", cwd=work)
        _git("remote", "add", "publish", remote, cwd=work)
        tree = student_tree(repo, labs, Path(tmp) / "student")
        # the commits are the checkout's user's (the throwaway repository has no config)
        env = dict(os.environ)
        for key, variable, fallback in [("user.name", "GIT_COMMITTER_NAME", "make publish"),
                                        ("user.email", "GIT_COMMITTER_EMAIL", "publish@localhost")]:
            if variable not in env:
                found = subprocess.run(["git", "config", key], cwd=repo, text=True,
                                       capture_output=True, check=False).stdout.strip()
                env[variable] = found or fallback
        for branch, folder, extra in [(pages_branch, html, ["--no-jekyll"]),
                                      (student_branch, tree, [])]:
            # start from the remote's branch when it exists, so the push adds a commit
            has = _git("ls-remote", "--heads", "publish", branch, cwd=work, capture=True)
            if has:
                _git("fetch", "-q", "publish", f"{branch}:{branch}", cwd=work)
            subprocess.run([str(ghp_import), *extra, "--push", "--remote", "publish",
                            "--branch", branch, "--message", f"{message} ({branch})",
                            str(folder)], cwd=work, check=True, env=env)


#: The address _config.yml carries until a course sets its own: it does not exist.
PLACEHOLDER_REPOSITORY = "https://github.com/allreduce-course/allreduce"


def _repository_url(repo: Path) -> str:
    import yaml

    return yaml.safe_load((repo / "_config.yml").read_text())["repository"]["url"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m allreduce.book",
        description="Publish the built book to gh-pages and the student copies to a branch")
    parser.add_argument("--html", type=Path, default=Path("_build/html"))
    parser.add_argument("--remote", default="origin",
                        help="a remote of this checkout, or a repository URL or path")
    parser.add_argument("--repo", type=Path, default=Path("."))
    parser.add_argument("--pages-branch", default="gh-pages")
    parser.add_argument("--student-branch", default="student")
    parser.add_argument("--check", action="store_true",
                        help="only check the remote and repository.url (make publish does, "
                             "before it builds the book)")
    args = parser.parse_args(argv)
    remote = args.remote
    names = _git("remote", cwd=args.repo, capture=True).split()
    if remote in names:
        remote = _git("remote", "get-url", remote, cwd=args.repo, capture=True)
    elif not (("://" in remote) or ("@" in remote) or Path(remote).exists()):
        parser.error(f"{remote!r} is neither a remote of {args.repo} nor a repository "
                     "(make publish REMOTE=<name, URL or path>)")
    if _repository_url(args.repo) == PLACEHOLDER_REPOSITORY:
        if not Path(remote).exists():  # a local path is a rehearsal; a real remote is not
            parser.error("_config.yml's repository.url is still the placeholder "
                         f"{PLACEHOLDER_REPOSITORY}: set it to the repository students "
                         "will read (until then the book has no launch buttons)")
        print(f"warning: repository.url is the placeholder {PLACEHOLDER_REPOSITORY}; "
              "publishing to a local path only", file=sys.stderr)
    if args.check:
        return 0
    labs = sorted((args.repo / "labs").glob("*.ipynb"))
    publish(args.html, remote, repo=args.repo, labs=labs, pages_branch=args.pages_branch,
            student_branch=args.student_branch)
    print(f"published {args.html} to {remote} ({args.pages_branch}) and the student copies "
          f"to its {args.student_branch} branch")
    return 0


if __name__ == "__main__":
    sys.exit(main())
