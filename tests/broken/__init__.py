"""Deliberately broken stores, each breaking one promise, and the clause that must catch it."""
