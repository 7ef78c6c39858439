"""`python -m workers.rank JOB_ID ATTEMPT RANK LOCAL_RANK`: one local rank of a multi-process job, started by its
rank 0 (workers.ranks.RankLauncher) on the same machine, with the store's address in PARVIS_RANK_HOST/PORT."""

from __future__ import annotations

import logging
import os
import sys

from service.logging_config import configure_logging, log_context
from service.settings import get_settings
from workers.ranks import run_rank


def main(argv: list[str]) -> int:
    job_id, attempt, rank, local_rank = argv[0], int(argv[1]), int(argv[2]), int(argv[3])
    settings = get_settings()
    configure_logging(settings.log_format)
    from workers.context import apply_torch_threads

    apply_torch_threads(settings, int(os.environ.get("PARVIS_RANK_WORLD", "1")))  # the machine's cores shared
    with log_context(job_id=job_id):
        try:
            run_rank(job_id, attempt, rank, local_rank,
                     address=(os.environ["PARVIS_RANK_HOST"], int(os.environ["PARVIS_RANK_PORT"])))
        except Exception:  # noqa: BLE001 - logged; rank 0 reads the error from the store
            logging.getLogger("parvis.worker").warning("rank %d of job %s failed", rank, job_id, exc_info=True)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
