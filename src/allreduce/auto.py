"""``allreduce.auto``: which model ``auto`` chooses with, and what it would choose.

The public face of :mod:`allreduce.algorithms.auto` (the dense ``auto``) for a user: by default
``auto`` uses the model committed with the library (:data:`DEFAULT_MODEL`); a saved model is
used only when asked for (:func:`load_model`, or :func:`use_model` with one in hand), and
:func:`explain` names the model behind a choice and where it came from; with a node layout
(``ranks_per_node=``) it chooses on the two levels of links :func:`use_network` sets::

    import allreduce.auto
    print(allreduce.auto.explain(1 << 18, 4))

Chapter "Choosing an algorithm".  The sparse ``auto`` chooses under the same model
(:func:`allreduce.sparse.auto.explain`).
"""

from .algorithms.auto import (
    DEFAULT_MODEL,
    DEFAULT_SOURCE,
    Explanation,
    describe_model,
    explain,
    load_model,
    model,
    model_source,
    use_model,
    use_network,
)

__all__ = ["DEFAULT_MODEL", "DEFAULT_SOURCE", "Explanation", "describe_model", "explain",
           "load_model", "model", "model_source", "use_model", "use_network"]
