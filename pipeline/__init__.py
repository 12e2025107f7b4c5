"""driftwatch: a retrieval-quality drift monitor for RAG systems (the job, the store and the figures)."""

__version__ = "0.1.0"
PROJECT_URL = "https://github.com/driftwatch/driftwatch"  # the repository: user agent, runbook links, CI template
