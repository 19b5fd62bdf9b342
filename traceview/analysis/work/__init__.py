"""What the work costs: a model's parameters and dtypes from its ``config.json``
(:mod:`.model_config`), a device's peaks (:mod:`.devices`), each op's FLOPs and bytes from
``record_shapes`` (:mod:`.op_flops`), and each step's and phase's MFU and MBU
(:mod:`.efficiency`)."""
