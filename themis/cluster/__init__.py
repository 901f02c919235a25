"""themis.cluster"""
