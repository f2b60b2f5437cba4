"""Training: token batches from rollouts, GRPO-family losses, group advantages, SFT and RL loops.

Import the submodules you need (`rlvr.train.losses`, `rlvr.train.advantages`, ...); this
package imports nothing itself, so `import rlvr` never pulls in torch.
"""
