"""(filled by the Modules issue)"""
__all__ = []
