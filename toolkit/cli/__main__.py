from toolkit.cli import main

raise SystemExit(main())
