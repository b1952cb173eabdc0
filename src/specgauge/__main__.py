from specgauge.cli import main

main()
