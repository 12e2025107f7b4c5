"""The judging loop that keeps the gold set abreast of the corpus (TREC's pooling and versioned qrels):

- `pool`: per run, the unjudged documents in any target's top k, each with its reason (new, outranks gold, a shadow
  of a gold document, the gold document changed or deleted), and the shadow warning;
- `ledger`: `judgments.jsonl`, the append-only judgments, and the queue (the pool minus what is judged);
- `review`: the queue as a person judges it (the Judge page and `driftwatch judge`): each pair's texts with their
  overlap marked, recording a grade on the text shown, progress, skips, importing judgments made elsewhere;
- `qrels`: the maintained qrels (the gold set plus the human judgments), their versions, and the history re-scored
  from the stored rankings;
- `prelabel`: an optional LLM suggestion per queued pair (never a human judgment), with its agreement;
- `questions`: drafted questions for new documents, reviewed in the same queue.

The frozen gold set and its series are never touched: the maintained series sit beside them."""
