"""themis.sim"""
