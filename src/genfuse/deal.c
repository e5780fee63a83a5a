/* genfuse: dealing streamed samples to an inference call's replicas
 * (inc/genfuse.h). Each generation head deals its own finished samples,
 * one at a time in finish order, to the replica of each call to which it
 * has dealt the least estimated work so far. A sample's estimate is its
 * forward cost relative to one token's matrix products: n tokens cost
 * n (1 + n / (12 w)) for a model of width w (per token and layer, the
 * matrix products take about 24 w^2 FLOPs and causal attention about
 * 2 n w). A replica's rows thus follow the work, not the row numbers, and
 * the heads need no messages to agree: every head balances its own share,
 * so the sums balance too. The cost model deals the same way
 * (src/cost/gen.c). */
#include "genfuse.h"

double genfuse_deal_cost(int n, int width)
{
  return (double)n * (1.0 + (double)n / (12.0 * (width > 0 ? width : 1)));
}

int genfuse_deal(int nrep, double *load, int sender, double cost)
{
  int best = -1;

  for (int j = 0; j < nrep; j++) { /* ties: the first from sender's own turn on */
    int r = (sender + j) % nrep;
    if (best < 0 || load[r] < load[best]) best = r;
  }
  if (best >= 0) load[best] += cost;
  return best;
}
