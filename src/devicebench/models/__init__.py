"""Network definitions: the CIFAR-10 tutorial `Net` (cifar_net.py) and the UNet (unet.py)."""
