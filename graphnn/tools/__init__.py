"""graphnn.tools: the command line (``graphnn dump-ir``, ``explain``, ``fuzz``) and
``graphnn.explain``; built on the public API and the compiler."""
