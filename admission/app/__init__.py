"""The process and the command: `fitgate serve` (`serve`), the `fitgate` CLI (`cli`), the
list of components serve runs (`components`), logging set-up and `fitgate explain`
(`diagnose`). Nothing below imports from here.
"""
