"""Data-parallel training on data held in shards (central DP, one trusted driver).

A data source that is a directory or glob of shard files (Parquet, .npz,
svmlight, CSV) is never loaded into one process: each shard is read where it
lies by the process that keeps it for the run - the driver itself
(``--backend local``) or a Dask worker process (``--backend dask``, a
:class:`distributed.LocalCluster` on 127.0.0.1 by default, or a running
scheduler).  The algorithm, its sampling, its noise and its accountant run on
the driver exactly as on one machine; what changes is the problem they call:

* :mod:`.shards` - finding the shard files, reading them in blocks, and
  preparing each shard's records (validation, label map, the model's public
  preprocessing) on the process that holds it;
* :mod:`.workers` - :class:`~.workers.ShardWorker`, the holder of some shards
  (a plain object in the driver, or a Dask actor on a worker process), and the
  two executors that call the holders step by step;
* :mod:`.problem` - :class:`~.problem.ShardedProblem`, the problem protocol
  over an executor: each clipped sum is the sum of the shards' clipped sums,
  each computed by the ordinary kernels on the shard's rows and added on the
  driver in shard order;
* :mod:`.pipeline` - ``dpreg run`` on a sharded source.

The page ``docs/scale-out.md`` states the design, its reproducibility promise,
its failure semantics and the measured scaling.
"""
