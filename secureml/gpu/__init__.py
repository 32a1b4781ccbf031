"""GPU requests (`MIG`, `TimeSlice`, `WholeGPU`) and how each lands on a tenant's cluster (`placement`)."""
