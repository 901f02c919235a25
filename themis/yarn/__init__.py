"""YARN side of Themis: the engine process driven by the ResourceManager plugin (Py4J)."""
