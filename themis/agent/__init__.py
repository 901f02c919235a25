"""themis.agent"""
