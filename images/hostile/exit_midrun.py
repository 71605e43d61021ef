"""exit-midrun: answers two requests correctly, then exits with status 3 on the third."""

import sys

from _common import last_value, log, messages, send

if __name__ == "__main__":
    answered = 0
    for message in messages():
        if message.get("type") == "hello":
            send({"type": "ready"})
        elif message.get("type") == "forecast":
            if answered == 2:
                log("exiting with status 3 in the middle of the run")
                sys.exit(3)
            send(last_value(message))
            answered += 1
        elif message.get("type") == "bye":
            break
    sys.exit(0)
