import sys

from yolo_mlops.cli import main

sys.exit(main())
