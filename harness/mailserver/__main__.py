from harness.mailserver.server import main

main()
