"""`python -m npuport ...`: the same command line as the `npuport` console script."""

from npuport.cli.main import main

main()
