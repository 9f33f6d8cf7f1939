"""The emulator as a container image: the Dockerfile, the build that prepares its context, and the image's init."""
