"""``make lab`` asks this before it starts JupyterLab: is a Jupyter server already running on
the folder?  If one is, it says where (its address, with the token) and how to stop it, and
``make lab`` starts no second server over the same notebooks.

It reads what ``jupyter server list`` reads: the ``jpserver-PID.json`` file each running
server keeps in Jupyter's runtime directory (``jupyter --runtime-dir``; ``$JUPYTER_RUNTIME_DIR``
moves it), skipping the files of servers whose process has ended.

Run as ``python -m allreduce.lab.server FOLDER``: exit status 0 when a server is running on
FOLDER (and what to open is printed), 1 when none is.
"""

from __future__ import annotations

import sys
from pathlib import Path


def running_on(folder: Path, runtime_dir: str | None = None) -> dict | None:
    """The info of a running Jupyter server whose root is ``folder``, or ``None``."""
    from jupyter_server.serverapp import list_running_servers

    wanted = Path(folder).resolve()
    for info in list_running_servers(runtime_dir):
        root = info.get("root_dir") or info.get("notebook_dir")
        if root and Path(root).expanduser().resolve() == wanted:
            return info
    return None


def address(info: dict) -> str:
    """The page to open: the server's JupyterLab, with its token when it has one."""
    url = str(info.get("url", "")).rstrip("/") + "/lab"
    return url + (f"?token={info['token']}" if info.get("token") else "")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m allreduce.lab.server FOLDER", file=sys.stderr)
        return 2
    folder = Path(args[0])
    info = running_on(folder)
    if info is None:
        return 1
    print(f"JupyterLab is already running on {folder}/ (process {info.get('pid')}): open\n"
          f"  {address(info)}\n"
          "make lab starts no second server on the same notebooks.  To stop that one: "
          f"{Path(sys.executable).parent / 'jupyter'} server stop {info.get('port')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
