"""driftwatch: a retrieval-quality drift monitor for RAG systems (the job, the store and the figures)."""

__version__ = "0.1.0"
