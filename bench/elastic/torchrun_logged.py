#!/usr/bin/python3
"""torchrun (torch.distributed.run) with its agent's log lines on stderr, each stamped with the
Unix time it was written: bench/elastic/compare.sh reads when the agent saw a worker fail.
Set LOGLEVEL=INFO too (torch's elastic loggers take their level from it). Arguments: torchrun's.
"""
import logging

from torch.distributed.run import main

if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO,
                        format="%(created).3f %(levelname)s %(name)s: %(message)s")
    main()
