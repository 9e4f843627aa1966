"""What recorded calls cost: FLOPs and bytes per call (op_costs), chip rooflines (roofline), the operator inventory (inventory).

Pure functions over npuport.trace records; nothing here touches a tensor.
"""
