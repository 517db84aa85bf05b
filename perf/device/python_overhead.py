"""Wall-clock cost of softwave's Python layer at B=16, N=128, d=1 on a GPU:
back-to-back calls (median of 5 batches of 1000-2000), against the compiled
core called directly on preallocated tensors and against torch's own autograd
cost for the same structure (a Function returning ready values and scaling
ready gradients). Complements perf/bench_torch.py, whose per-call CUDA-event
timing of such short calls is dominated by the events themselves.

    python3 perf/device/python_overhead.py
"""
import time, statistics, torch
import softwave
from softwave import _core, _engine
from softwave.torch import SoftDTW, _adapter
from softwave._common import options
x=torch.randn(16,128,1,device="cuda"); y=torch.randn(16,128,1,device="cuda")
v=torch.empty(16,device="cuda"); loss=SoftDTW(gamma=1.0); opts=options(1.0)
def t(f,n=2000):
    for _ in range(100): f()
    res=[]
    for rep in range(5):
        torch.cuda.synchronize(); s=time.perf_counter()
        for _ in range(n): f()
        torch.cuda.synchronize(); res.append((time.perf_counter()-s)/n*1e6)
    return statistics.median(res)
def module(): loss(x,y)
def core(): _core.soft_dtw(x,y,v,None,None,None,None,None,None,1.0,"sqeuclidean",-1,"automatic",False,0)
def core_alloc(): _core.soft_dtw(x,y,torch.empty(16,device="cuda"),None,None,None,None,None,None,1.0,"sqeuclidean",-1,"automatic",False,0)
def engine(): _engine.soft_dtw(_adapter,x,y,opts)
def nothing(): _core.has_cuda()
def kokkos_fence(): _core.synchronize(0)
def torch_sync(): torch.cuda.synchronize()
for name,f in [("module",module),("engine",engine),("core_alloc",core_alloc),("core",core),("module",module),("core",core),("kokkos_fence",kokkos_fence),("torch_sync",torch_sync)]:
    print(f"{name:12s} {t(f):8.1f} us")
xg=x.clone().requires_grad_(); yg=y.clone().requires_grad_()
gx,gy=torch.empty_like(x),torch.empty_like(y)
def fb():
    xg.grad=yg.grad=None; loss(xg,yg).sum().backward()
def core_grad(): _core.soft_dtw(x,y,v,gx,gy,None,None,None,None,1.0,"sqeuclidean",-1,"automatic",False,0)
class Pre(torch.autograd.Function):
    @staticmethod
    def forward(ctx,a,b): return v.clone()
    @staticmethod
    def backward(ctx,g):
        s=g.reshape(-1,1,1); return gx*s, gy*s
def floor():
    xg.grad=yg.grad=None; Pre.apply(xg,yg).sum().backward()
def floor_plus_core():
    core_grad(); floor()
for name,f in [("fwdbwd",fb),("core_grad",core_grad),("torch_floor",floor),("floor+core",floor_plus_core),("fwdbwd",fb),("core_grad",core_grad)]:
    print(f"{name:12s} {t(f,1000):8.1f} us")
