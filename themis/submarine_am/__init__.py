"""Entry points under the module paths of earlier releases.

The application master now lives in :mod:`themis.am` (the core) and
:mod:`themis.am.launchers.yarn` (its YARN launcher). AM jars, running apps and job
containers of earlier releases start ``python -m themis.submarine_am.am``,
``...runner`` and ``...tbserve``; the modules here run the current ones under those names.
``lib/`` is where an installed wheel ships the AM jar (:func:`themis.client.cluster.find_am_jar`).
"""
