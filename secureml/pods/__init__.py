"""The pods a compiled pipeline becomes: KFP's and Argo's shapes, the platform's mutation, the admitted pod."""
