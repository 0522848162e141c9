"""A job-wide check over torch.distributed: where each rank sits (``launch``), what the job's
nodes have and which node is the odd one out (``job``, pure), the job table as text (``table``),
and the one module that imports torch to gather the ranks' facts (``gather``)."""
