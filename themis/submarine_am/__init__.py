"""themis.submarine_am"""
