"""themis.arbiter"""
