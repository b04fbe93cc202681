# Configuration of the IPython kernels that run this course's code: the book's pages
# (jupyter-book), the labs under nbval and grading, and JupyterLab.  `make` copies it into
# .venv/etc/ipython/, one of the folders from which every IPython kernel of that environment
# reads its configuration (IPython's ENV_CONFIG_DIRS, sys.prefix/etc/ipython); with conda,
# copy it into $CONDA_PREFIX/etc/ipython/ (mkdir -p it first: no package makes it).
#
# ipykernel >= 7 logs, at every kernel start,
#   "WARNING | Kernel is running over TCP without encryption. All communication (including
#    code and outputs) is sent in plain text and is susceptible to eavesdropping. ..."
# (ipykernel/kernelapp.py, IPKernelApp.init_sockets).  jupyter-book starts one kernel per
# executed page, through nbclient, which gives no way to ask jupyter_client for CurveZMQ keys
# (KernelManager.transport_encryption), so `make book` printed it once per page.  Where the
# kernel listens on a loopback address, as every kernel this course starts does, that
# traffic never leaves the machine and cannot be read off the loopback interface without
# root, so the warning says nothing a reader can act on: this filter drops exactly that
# message, and only for a loopback address.  A kernel bound to a network address still
# warns, and every other message of the kernel is logged as before.  (`make lab` asks
# JupyterLab for encrypted kernels, so there the warning has no cause to appear.)
import ipaddress


def _loopback(address: str) -> bool:
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def _drop_loopback_tcp_warning(record) -> bool:
    if "running over TCP without encryption" not in record.getMessage():
        return True
    from ipykernel.kernelapp import IPKernelApp

    app = IPKernelApp.instance() if IPKernelApp.initialized() else None
    return not (app is not None and app.transport == "tcp" and _loopback(app.ip))


c = get_config()  # noqa: F821 (defined by IPython when it loads this file)
c.IPKernelApp.logging_config = {
    "filters": {"loopback_tcp": {"()": lambda: _drop_loopback_tcp_warning}},
    "loggers": {"IPKernelApp": {"filters": ["loopback_tcp"]}},
}
