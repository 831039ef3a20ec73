from trainmedic.cli.main import main

main()
